// SPDX-License-Identifier: GPL-2.0
/*
 * libexpress_mark.so: the uprobe targets through which a program opts a
 * thread into an scx_express class (see express_mark.h).  The bodies only
 * bump distinct counters: they must stay real, separate, non-inlined
 * functions with their own .dynsym entries so uprobes can attach to them.
 */
#include "express_mark.h"

#define EXPORT __attribute__((noinline, used, visibility("default")))

static volatile unsigned long marks_agent, marks_gpu, unmarks;

EXPORT void express_mark_agent(void)
{
	marks_agent++;
	__asm__ volatile("" ::: "memory");
}

EXPORT void express_mark_gpu(void)
{
	marks_gpu += 2;
	__asm__ volatile("" ::: "memory");
}

EXPORT void express_unmark(void)
{
	unmarks += 3;
	__asm__ volatile("" ::: "memory");
}
