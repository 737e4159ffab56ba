/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Counters: the two per-CPU arrays that userspace sums into --stats,
 * --monitor and OpenMetrics (src/stats.rs, one table row per index).
 *
 * Every other file counts through the helpers here and none defines a
 * counter of its own, so this file uses nothing and anything may use it.
 * Per-CPU arrays: an increment is a plain add on this CPU's copy, a few ns
 * with no atomic and no shared cache line, on paths taken millions of
 * times a second.
 */
#include "express.bpf.h"

/* Scheduler-wide counters, indexed by enum stat_idx (intf.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_EXPRESS_STATS);
	__type(key, u32);
	__type(value, u64);
} stats SEC(".maps");

/* Per-class express-lane counters, class * NR_LANE_STATS + idx. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_CLASSES * NR_LANE_STATS);
	__type(key, u32);
	__type(value, u64);
} lane_stats SEC(".maps");

__hidden void stat_add(enum stat_idx idx, u64 val)
{
	u32 key = idx;
	u64 *cnt = bpf_map_lookup_elem(&stats, &key);

	if (cnt)
		*cnt += val;
}

__hidden void stat_inc(enum stat_idx idx)
{
	stat_add(idx, 1);
}

__hidden void lane_stat_add(u32 class, enum lane_stat_idx idx, u64 val)
{
	u32 key = class * NR_LANE_STATS + idx;
	u64 *cnt;

	if (class >= NR_CLASSES)
		return;
	cnt = bpf_map_lookup_elem(&lane_stats, &key);
	if (cnt)
		*cnt += val;
}

__hidden void lane_stat_inc(u32 class, enum lane_stat_idx idx)
{
	lane_stat_add(class, idx, 1);
}

/* Per-tenant counters, tenant * NR_TENANT_STATS + idx. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TENANTS * NR_TENANT_STATS);
	__type(key, u32);
	__type(value, u64);
} tenant_stats SEC(".maps");

/* Wakeup latencies, group * NR_LAT_STATS + idx (enum lat_stat_idx). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_LAT_GROUPS * NR_LAT_STATS);
	__type(key, u32);
	__type(value, u64);
} lat_stats SEC(".maps");

/*
 * classes.*.latency_target_us and tenants' latency_target_us, in ns: a
 * wakeup that waits longer to run counts as over target. Only counted:
 * the target steers no decision.
 */
KNOB u64 class_lat_target_ns[NR_CLASSES];
KNOB u64 tenant_lat_target_ns[MAX_TENANTS];

__hidden void tenant_stat_inc(u32 tenant, enum tenant_stat_idx idx)
{
	u32 key = (tenant - 1) * NR_TENANT_STATS + idx;
	u64 *cnt;

	/* @tenant is an index + 1; 0 (no tenant) counts nowhere. */
	if (!tenant || tenant > MAX_TENANTS)
		return;
	cnt = bpf_map_lookup_elem(&tenant_stats, &key);
	if (cnt)
		*cnt += 1;
}

/* Histogram bucket of a latency of @us microseconds (intf.h, LAT_BUCKETS). */
static u32 lat_bucket(u64 us)
{
	u32 b = 0;

	while (us && b < LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

static void lat_add(u32 group, u32 bucket, bool over)
{
	u32 base = group * NR_LAT_STATS, key;
	u64 *cnt;

	key = base + LAT_WAKEUPS;
	if ((cnt = bpf_map_lookup_elem(&lat_stats, &key)))
		*cnt += 1;
	key = base + LAT_HIST + bucket;
	if ((cnt = bpf_map_lookup_elem(&lat_stats, &key)))
		*cnt += 1;
	key = base + LAT_OVER_TARGET;
	if (over && (cnt = bpf_map_lookup_elem(&lat_stats, &key)))
		*cnt += 1;
}

/*
 * An express-class task of @class (and @tenant, index + 1, or 0) woke up
 * @ns ago and runs now: count it for its class and its tenant.
 */
__hidden void lat_record(u32 class, u32 tenant, u64 ns)
{
	u32 bucket = lat_bucket(ns / NSEC_PER_USEC);

	if (class >= NR_CLASSES)
		return;
	lat_add(class, bucket, ns > class_lat_target_ns[class]);
	if (tenant && tenant <= MAX_TENANTS)
		lat_add(NR_CLASSES + tenant - 1, bucket, ns > tenant_lat_target_ns[tenant - 1]);
}
