/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Declarations for the fake libcuda.so.1 used by the scx_express workloads.
 * Names match the real CUDA driver API; types are opaque stand-ins with
 * roughly the real arity (the ABI is not meant to match real CUDA).
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;			/* 0 == CUDA_SUCCESS */
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;
typedef struct CUlaunchConfig_st CUlaunchConfig;

#define CUDA_SUCCESS 0

CUresult cuInit(unsigned int flags);

/* Launches: CPU cost FAKECUDA_LAUNCH_ITERS, queue FAKECUDA_KERNEL_US of "GPU". */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			CUstream s, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			     CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f,
			  void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f,
			       void **params, void **extra);
/* Graph launch: one launch's CPU cost, queues FAKECUDA_GRAPH_NODES kernels. */
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);

/* Sync/copies: block (clock_nanosleep) until the simulated GPU is idle. */
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamSynchronize_ptsz(CUstream s);
CUresult cuCtxSynchronize(void);
CUresult cuEventSynchronize(CUevent e);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n,
				   CUstream s);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
			    CUstream s);

/* Not CUDA: reports the effective settings (after env parsing). */
void fakecuda_config(unsigned long long *launch_iters,
		     unsigned long long *kernel_us,
		     unsigned long long *graph_nodes);

/* Not CUDA: the sleeping syncs so far (a spinning sync is not counted):
 * how many, their lateness past the fake GPU's end in all, and how many
 * came back over 1 ms late. */
void fakecuda_sync_late(unsigned long long *n, unsigned long long *total_ns,
			unsigned long long *over_1ms);

#ifdef __cplusplus
}
#endif

#endif
