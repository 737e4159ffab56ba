// SPDX-License-Identifier: GPL-2.0
/*
 * libexpress_mark.so: how a program opts a thread into an scx_express class
 * (see express_mark.h). Two channels, so no call is lost:
 *
 * - scx_express attaches uprobes to these functions: a call while it runs
 *   classifies the calling thread at once.
 * - Each call is also recorded in express_mark_registry, which scx_express
 *   reads (process_vm_readv) when it first sees this library in a process:
 *   calls made before it attached its uprobes still count.
 *
 * The functions must stay real, separate, non-inlined functions with their
 * own .dynsym entries, so uprobes can attach to them.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "express_mark.h"

#define EXPORT __attribute__((noinline, used, visibility("default")))

/* Layout read by scx_express (src/discovery.rs; the symbol name in
 * src/probes.rs): keep in sync. */
#define EXPRESS_MARK_MAGIC	0x4b52414d58505845ULL	/* "EXPXMARK" */
#define EXPRESS_MARK_SLOTS	1024

struct express_mark_entry {
	int32_t tid;
	int32_t class_id;	/* 0 normal, 1 gpu, 2 agent */
};

__attribute__((used, visibility("default"))) struct {
	uint64_t magic;
	uint32_t count;		/* entries used, at most EXPRESS_MARK_SLOTS */
	uint32_t __pad;
	struct express_mark_entry entries[EXPRESS_MARK_SLOTS];
} express_mark_registry = { .magic = EXPRESS_MARK_MAGIC };

static void record(int32_t class_id)
{
	int32_t tid = (int32_t)syscall(SYS_gettid);
	uint32_t n = __atomic_load_n(&express_mark_registry.count, __ATOMIC_ACQUIRE);
	uint32_t i;

	for (i = 0; i < n && i < EXPRESS_MARK_SLOTS; i++) {
		if (express_mark_registry.entries[i].tid == tid) {
			__atomic_store_n(&express_mark_registry.entries[i].class_id,
					 class_id, __ATOMIC_RELEASE);
			return;
		}
	}
	i = __atomic_fetch_add(&express_mark_registry.count, 1, __ATOMIC_ACQ_REL);
	if (i >= EXPRESS_MARK_SLOTS)
		return;	/* full: the uprobe channel still works */
	express_mark_registry.entries[i].class_id = class_id;
	__atomic_store_n(&express_mark_registry.entries[i].tid, tid, __ATOMIC_RELEASE);
}

EXPORT void express_mark_agent(void)
{
	record(2);
	__asm__ volatile("" ::: "memory");
}

EXPORT void express_mark_gpu(void)
{
	record(1);
	__asm__ volatile("" ::: "memory");
}

EXPORT void express_unmark(void)
{
	record(0);
	__asm__ volatile("" ::: "memory");
}
