/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tenants: which configured [[tenants]] entry a task belongs to.
 *
 * A task of class C belongs to the tenant of class C whose cgroup is the
 * task's cgroup or its nearest configured ancestor. Userspace fills
 * `tenant_cgroups` (cgroup id -> tenant per class) from the configured
 * paths: on cgroup2 a directory's inode number is the cgroup id. The
 * budget of a tenant (its bucket, its quota) is in budget.bpf.c.
 *
 * Resolution walks the task's cgroup ancestors, deepest first, one hash
 * lookup each: a few hundred ns for a deep hierarchy. Only express-class
 * tasks pay it, once per wakeup (placement.bpf.c), and nobody does while
 * no tenant is configured. A process moved to another cgroup changes
 * tenant at its next wakeup or requeue. The index is resolved before each
 * wakeup's budget check, so a reload that renumbers the tenants can only
 * misattribute the express run in progress at that moment.
 */
#include "express.bpf.h"

/* Ancestors looked at, deepest first: deeper hierarchies are rare. */
#define TENANT_MAX_DEPTH 32

/* Number of [[tenants]] configured; 0 skips resolution. */
KNOB u32 nr_tenants;

/* cgroup id -> the tenant of each class there (struct tenant_cgroup). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TENANTS);
	__type(key, u64);
	__type(value, struct tenant_cgroup);
} tenant_cgroups SEC(".maps");

/* Tenant names by index, for `scx_express ps` (pinned; BPF never reads it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TENANTS);
	__type(key, u32);
	__type(value, struct tenant_name);
} tenant_names SEC(".maps");

/* The tenant (index + 1) of @p for @class, or 0 for none. */
__hidden u32 tenant_resolve(struct task_struct *p, u32 class)
{
	struct cgroup *cgrp, *anc;
	struct tenant_cgroup *tc;
	s32 level, i;
	u64 id;

	if (!nr_tenants || class >= NR_CLASSES)
		return 0;
	/* Probe reads: a plain walk of these RCU pointers needs no verifier proof. */
	cgrp = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	if (!cgrp)
		return 0;
	level = BPF_CORE_READ(cgrp, level);
	bpf_for(i, 0, TENANT_MAX_DEPTH) {
		if (i > level)
			break;
		anc = NULL;
		if (bpf_probe_read_kernel(&anc, sizeof(anc), &cgrp->ancestors[level - i]) || !anc)
			break;
		id = BPF_CORE_READ(anc, kn, id);
		tc = bpf_map_lookup_elem(&tenant_cgroups, &id);
		if (tc && tc->tenant[class])
			return tc->tenant[class];
	}
	return 0;
}
