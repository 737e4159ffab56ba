//! Tenants' cgroups: keeps the BPF `tenant_cgroups` map (cgroup id -> the
//! tenant of each class there) and `tenant_names` in step with the config
//! and the cgroup tree. On cgroup2 a cgroup's id is its directory's inode
//! number, so a stat per configured path resolves it. A cgroup that does
//! not exist yet (or was re-created, with a new id) is picked up by the
//! next pass: the scheduler runs one at start, on reload and every second.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use log::{info, warn};

use crate::bpf_intf::{self, tenant_cgroup, tenant_name};
use crate::config::{ClassName, Tenant};

/// Where cgroup2 is mounted: the first cgroup2 line of /proc/self/mounts.
pub fn cgroup2_root() -> PathBuf {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| {
            m.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| f.len() > 2 && f[2] == "cgroup2")
                .map(|f| PathBuf::from(f[1]))
        })
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"))
}

/// The map contents for `tenants` (index i is tenant i + 1), with the
/// tenants whose cgroup does not exist.
fn desired(tenants: &[Tenant]) -> (BTreeMap<u64, tenant_cgroup>, Vec<&str>) {
    let root = cgroup2_root();
    let mut map: BTreeMap<u64, tenant_cgroup> = BTreeMap::new();
    let mut missing = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        let dir = root.join(t.cgroup.trim_start_matches('/'));
        let Ok(md) = std::fs::metadata(&dir) else {
            missing.push(t.name.as_str());
            continue;
        };
        let class = match t.class {
            ClassName::Gpu => bpf_intf::task_class_CLASS_GPU,
            ClassName::Agent => bpf_intf::task_class_CLASS_AGENT,
            ClassName::Normal => continue,
        };
        let e = map
            .entry(md.ino())
            .or_insert(tenant_cgroup { tenant: [0; 3] });
        e.tenant[class as usize] = i as u32 + 1;
    }
    (map, missing)
}

fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: plain-old-data structs from intf.h, read as bytes.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// What was written: the cgroup map (id -> value bytes) and the names.
type Written = (BTreeMap<u64, Vec<u8>>, Vec<String>);

/// Keeps the two maps in step; remembers what it wrote and what it logged.
#[derive(Default)]
pub struct TenantCgroups {
    /// The cgroup map and the names last written.
    written: Option<Written>,
    logged_missing: HashSet<String>,
}

impl TenantCgroups {
    /// Resolves `tenants`' cgroups and writes the maps where they changed.
    pub fn sync(
        &mut self,
        cgroups: &impl MapCore,
        names: &impl MapCore,
        tenants: &[Tenant],
    ) -> Result<()> {
        let (map, missing) = desired(tenants);
        for name in &missing {
            if self.logged_missing.insert(name.to_string()) {
                warn!("tenant {name}: its cgroup does not exist (yet); checked again every second");
            }
        }
        self.logged_missing.retain(|n| {
            let still = missing.contains(&n.as_str());
            if !still {
                info!("tenant {n}: its cgroup exists now");
            }
            still
        });
        let want: BTreeMap<u64, Vec<u8>> = map
            .iter()
            .map(|(k, v)| (*k, bytes_of(v).to_vec()))
            .collect();
        let want_names: Vec<String> = tenants.iter().map(|t| t.name.clone()).collect();
        let want = (want, want_names);
        if self.written.as_ref() == Some(&want) {
            return Ok(());
        }
        self.write(cgroups, names, &want.0, tenants)?;
        self.written = Some(want);
        Ok(())
    }

    fn write(
        &self,
        cgroups: &impl MapCore,
        names: &impl MapCore,
        want: &BTreeMap<u64, Vec<u8>>,
        tenants: &[Tenant],
    ) -> Result<()> {
        for key in cgroups.keys().collect::<Vec<_>>() {
            let id = u64::from_ne_bytes(key[..8].try_into().unwrap_or_default());
            if !want.contains_key(&id) {
                let _ = cgroups.delete(&key);
            }
        }
        for (id, v) in want {
            cgroups
                .update(&id.to_ne_bytes(), v, MapFlags::ANY)
                .context("writing the tenant_cgroups map")?;
        }
        let nr = bpf_intf::express_consts_MAX_TENANTS as u32;
        for i in 0..nr {
            let mut n = tenant_name {
                name: [0; bpf_intf::express_consts_TENANT_NAME_LEN as usize],
            };
            if let Some(t) = tenants.get(i as usize) {
                let len = n.name.len() - 1;
                for (d, s) in n.name.iter_mut().zip(t.name.bytes().take(len)) {
                    *d = s as _;
                }
            }
            names
                .update(&i.to_ne_bytes(), bytes_of(&n), MapFlags::ANY)
                .context("writing the tenant_names map")?;
        }
        Ok(())
    }
}
