// SPDX-License-Identifier: GPL-2.0
/*
 * fakecuda: a stand-in libcuda.so.1 for testing scx_express without a GPU.
 *
 * scx_express finds CUDA launcher threads with uprobes on libcuda symbols, so
 * this library exports the real driver-API names as real, distinct functions
 * (noinline, own bodies, own .dynsym entries, versioned @@libcuda.so.1 via
 * fakecuda.map).  Behind them is a simulated GPU, one per process:
 *
 *  - a launch burns FAKECUDA_LAUNCH_ITERS iterations of spin_iters() on the
 *    calling CPU (default ~5 us on a modern core, see the README/calibrate),
 *    counted in iterations so lost CPU shows up as lost throughput, and queues
 *    FAKECUDA_KERNEL_US (default 20) of GPU time:
 *        busy_until = max(now, busy_until) + kernel_us      (CLOCK_MONOTONIC)
 *  - a graph launch costs one launch of CPU and queues
 *    FAKECUDA_GRAPH_NODES (default 1) kernels;
 *  - synchronize calls and device-to-host / generic async copies wait until
 *    busy_until.  (Real async copies do not block; here they do, because in
 *    a decode loop the DtoH copy of the sampled token is where the CPU waits
 *    for the GPU.)  By default they sleep (clock_nanosleep TIMER_ABSTIME),
 *    like CUDA's blocking-sync mode; FAKECUDA_SYNC=spin makes them spin on
 *    the clock instead, like CUDA's default (cudaDeviceScheduleAuto spins
 *    while the host has more cores than active contexts): the launching
 *    thread then wants a whole CPU, as the real eager, Triton and
 *    CUDA-graph loops measured on the H100 host did.
 *
 * Everything returns 0 (CUDA_SUCCESS).  Pointer arguments are ignored.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "fakecuda.h"

/* ~5 us: 1.6 ns/iteration measured on a Sapphire Rapids (AMX) Xeon VM. */
#define DEFAULT_LAUNCH_ITERS 3000ull
#define DEFAULT_KERNEL_US 20ull
#define DEFAULT_GRAPH_NODES 1ull

#define EXPORT __attribute__((noinline, used, visibility("default")))

static uint64_t launch_iters = DEFAULT_LAUNCH_ITERS;
static uint64_t kernel_ns = DEFAULT_KERNEL_US * 1000;
static uint64_t graph_nodes = DEFAULT_GRAPH_NODES;
static int spin_sync;			/* FAKECUDA_SYNC=spin */

static uint64_t busy_until;		/* ns, CLOCK_MONOTONIC; atomics only */

/*
 * How late the sleeping syncs come back: now - busy_until after each
 * clock_nanosleep(). The lateness is the timer's delivery plus the wait
 * from the wakeup to running, the second of which a scheduler's own
 * counters see (scx_express: wait_us per class) and the first of which no
 * scheduler does. Natively ~0.1 ms (the timer slack's 50 us and the
 * wakeup); under TCG, a vCPU the host is slow to run makes it
 * milliseconds. fakecuda_sync_late()
 * reports it (counters since the start: a caller takes differences).
 */
static uint64_t late_n, late_ns, late_over_1ms;
static volatile uint64_t sink;		/* consumes spin results */

/* Per-entry-point call counters: also make every exported body distinct. */
enum {
	C_INIT, C_LK, C_LK_PTSZ, C_LKEX, C_LKEX_PTSZ, C_GRAPH, C_GRAPH_PTSZ,
	C_SSYNC, C_SSYNC_PTSZ, C_CTXSYNC, C_EVSYNC, C_DTOH, C_DTOH_PTSZ,
	C_MEMCPY, C_MEMCPY_PTSZ, C_NR,
};
static volatile uint64_t calls[C_NR];

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || *s == '-')
		return def;
	return v;
}

__attribute__((constructor)) static void fakecuda_setup(void)
{
	launch_iters = env_u64("FAKECUDA_LAUNCH_ITERS", DEFAULT_LAUNCH_ITERS);
	kernel_ns = env_u64("FAKECUDA_KERNEL_US", DEFAULT_KERNEL_US) * 1000;
	graph_nodes = env_u64("FAKECUDA_GRAPH_NODES", DEFAULT_GRAPH_NODES);
	spin_sync = getenv("FAKECUDA_SYNC") && !strcmp(getenv("FAKECUDA_SYNC"), "spin");
}

/* CPU side of a launch, then queue @nkernels kernels on the fake GPU. */
static __attribute__((noinline)) void do_launch(uint64_t nkernels, uint64_t seed)
{
	uint64_t cur, next, now;

	sink = spin_iters(launch_iters, seed);

	now = now_ns();
	cur = __atomic_load_n(&busy_until, __ATOMIC_RELAXED);
	do {
		next = (cur > now ? cur : now) + nkernels * kernel_ns;
	} while (!__atomic_compare_exchange_n(&busy_until, &cur, next, 1,
					      __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
}

/* Block until the fake GPU has drained everything queued so far. */
static __attribute__((noinline)) void do_sync(void)
{
	uint64_t until = __atomic_load_n(&busy_until, __ATOMIC_RELAXED), late;
	struct timespec ts = { .tv_sec = until / 1000000000ull,
			       .tv_nsec = until % 1000000000ull };

	if (until <= now_ns())
		return;
	if (spin_sync) {
		while (now_ns() < until)
			__builtin_ia32_pause();
		return;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	late = now_ns() - until;
	__atomic_fetch_add(&late_n, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&late_ns, late, __ATOMIC_RELAXED);
	if (late > 1000000ull)
		__atomic_fetch_add(&late_over_1ms, 1, __ATOMIC_RELAXED);
}

EXPORT void fakecuda_sync_late(unsigned long long *n, unsigned long long *total_ns,
			       unsigned long long *over_1ms)
{
	if (n)
		*n = __atomic_load_n(&late_n, __ATOMIC_RELAXED);
	if (total_ns)
		*total_ns = __atomic_load_n(&late_ns, __ATOMIC_RELAXED);
	if (over_1ms)
		*over_1ms = __atomic_load_n(&late_over_1ms, __ATOMIC_RELAXED);
}

EXPORT void fakecuda_config(unsigned long long *iters, unsigned long long *kus,
			    unsigned long long *nodes)
{
	if (iters)
		*iters = launch_iters;
	if (kus)
		*kus = kernel_ns / 1000;
	if (nodes)
		*nodes = graph_nodes;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	calls[C_INIT] += 1 + (flags & 0);
	return CUDA_SUCCESS;
}

/* ---- launches ---------------------------------------------------------- */

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
			       unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shmem, CUstream s,
			       void **params, void **extra)
{
	(void)f; (void)gy; (void)gz; (void)by; (void)bz; (void)shmem;
	(void)s; (void)params; (void)extra;
	calls[C_LK]++;
	do_launch(1, gx + bx + C_LK);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
				    unsigned gz, unsigned bx, unsigned by,
				    unsigned bz, unsigned shmem, CUstream s,
				    void **params, void **extra)
{
	(void)f; (void)gy; (void)gz; (void)by; (void)bz; (void)shmem;
	(void)s; (void)params; (void)extra;
	calls[C_LK_PTSZ]++;
	do_launch(1, gx + bx + C_LK_PTSZ);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f,
				 void **params, void **extra)
{
	(void)cfg; (void)f; (void)params; (void)extra;
	calls[C_LKEX]++;
	do_launch(1, C_LKEX);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f,
				      void **params, void **extra)
{
	(void)cfg; (void)f; (void)params; (void)extra;
	calls[C_LKEX_PTSZ]++;
	do_launch(1, C_LKEX_PTSZ);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
	(void)g; (void)s;
	calls[C_GRAPH]++;
	do_launch(graph_nodes, C_GRAPH);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
	(void)g; (void)s;
	calls[C_GRAPH_PTSZ]++;
	do_launch(graph_nodes, C_GRAPH_PTSZ);
	return CUDA_SUCCESS;
}

/* ---- synchronisation and copies ----------------------------------------- */

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	(void)s;
	calls[C_SSYNC]++;
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	(void)s;
	calls[C_SSYNC_PTSZ]++;
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	calls[C_CTXSYNC]++;
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
	(void)e;
	calls[C_EVSYNC]++;
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n,
				     CUstream s)
{
	(void)dst; (void)src; (void)s;
	calls[C_DTOH] += 1 + (n & 0);
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n,
					  CUstream s)
{
	(void)dst; (void)src; (void)s;
	calls[C_DTOH_PTSZ] += 1 + (n & 0);
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
			      CUstream s)
{
	(void)dst; (void)src; (void)s;
	calls[C_MEMCPY] += 1 + (n & 0);
	do_sync();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
				   CUstream s)
{
	(void)dst; (void)src; (void)s;
	calls[C_MEMCPY_PTSZ] += 1 + (n & 0);
	do_sync();
	return CUDA_SUCCESS;
}
