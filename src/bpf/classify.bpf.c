/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Classification: the one task-class map.
 *
 * Every thread gets a task_ctx in BPF task storage when it joins sched_ext.
 * Its `class` says which lane it may use. Sources of class (probes, rules,
 * the CLI) write it; the scheduler only reads it.
 */
#include "express.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

__hidden struct task_ctx *task_ctx_get(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

__hidden struct task_ctx *task_ctx_create(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}
