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
