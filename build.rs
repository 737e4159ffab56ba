// Compiles the BPF side and generates the Rust bindings:
//  - the scheduler: src/bpf/*.bpf.c (but trace.bpf.c) linked into one object, its skeleton
//    (bpf_skel.rs) and the bindings of src/bpf/intf.h (bpf_intf.rs);
//  - the tracer of `scx_express trace`: src/bpf/trace.bpf.c alone, with no
//    sched_ext in it, so it loads on kernels without sched_ext
//    (trace_skel.rs).
use std::path::PathBuf;

fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("BPF build setup failed: set BPF_CLANG to clang >= 18 (e.g. /usr/bin/clang-19)")
        .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
        .enable_skel("src/bpf/main.bpf.c", "bpf")
        .add_source("src/bpf/stats.bpf.c")
        .add_source("src/bpf/ctx.bpf.c")
        .add_source("src/bpf/classify.bpf.c")
        .add_source("src/bpf/tenant.bpf.c")
        .add_source("src/bpf/budget.bpf.c")
        .add_source("src/bpf/hold.bpf.c")
        .add_source("src/bpf/cpu_quality.bpf.c")
        .add_source("src/bpf/placement.bpf.c")
        .add_source("src/bpf/fair.bpf.c")
        .add_source("src/bpf/usersched.bpf.c")
        .compile_link_gen()
        .expect("BPF build failed");
    build_trace_skel();
}

/// scx_cargo's BpfBuilder names its outputs bpf_skel.rs / bpf.bpf.o, so the
/// second object goes through libbpf-cargo directly, with the same clang and
/// the same flags (BpfBuilder has unpacked the scx headers under OUT_DIR).
fn build_trace_skel() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let clang = scx_cargo::ClangInfo::new().expect("BPF_CLANG: clang >= 18");
    let cflags: Vec<String> = match std::env::var("BPF_CFLAGS") {
        Ok(v) => v.split_whitespace().map(String::from).collect(),
        Err(_) => {
            let arch = clang.kernel_target().expect("kernel target of clang");
            let hdrs = out.join("scx_utils-bpf_h");
            let mut f = clang.determine_base_cflags().expect("BPF cflags");
            f.extend(env_words("BPF_EXTRA_CFLAGS_PRE_INCL"));
            f.push(format!("-I{}/arch/{arch}", hdrs.display()));
            f.push(format!("-I{}", hdrs.display()));
            f.push(format!("-I{}/bpf-compat", hdrs.display()));
            f.extend(env_words("BPF_EXTRA_CFLAGS_POST_INCL"));
            f
        }
    };
    let src = "src/bpf/trace.bpf.c";
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .obj(out.join("trace.bpf.o"))
        .clang(&clang.clang)
        .clang_args(&cflags)
        .rustfmt("disable_rustfmt")
        .reference_obj(true)
        .build_and_generate(out.join("trace_skel.rs"))
        .expect("building the trace BPF object (src/bpf/trace.bpf.c)");
    for dep in [
        src,
        "src/bpf/classify.bpf.h",
        "src/bpf/intf.h",
        "src/bpf/trace_intf.h",
    ] {
        println!("cargo:rerun-if-changed={dep}");
    }
}

fn env_words(name: &str) -> Vec<String> {
    std::env::var(name)
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}
