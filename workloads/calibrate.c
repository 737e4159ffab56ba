// SPDX-License-Identifier: GPL-2.0
/*
 * calibrate: measures the CPU cost of the workloads' unit of work on this
 * machine, so iteration counts (FAKECUDA_LAUNCH_ITERS, agent --burst-iters)
 * can be turned into microseconds.  Times are thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so a busy machine inflates them only slightly.
 *
 *   calibrate [ms]    spin for about ms milliseconds per measurement (200)
 *
 * Prints ns per spin iteration, iterations for 5 us and 200 us, and the
 * measured CPU cost of one fake cuLaunchKernel with the current environment.
 */
#define _GNU_SOURCE
#include "common.h"
#include "fakecuda/fakecuda.h"

static volatile uint64_t sink;

int main(int argc, char **argv)
{
	double ms = argc > 1 ? parse_double("ms", argv[1]) : 200;
	uint64_t n = 1000000, t0, t1, best = UINT64_MAX;
	unsigned long long iters, kus, nodes;
	double ns_per_iter;
	int launches;

	/* Grow n until one run takes ~ms, then keep the best of 5 runs. */
	for (;;) {
		t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		sink = spin_iters(n, 7);
		t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (t1 - t0 >= ms * 1e6 / 4)
			break;
		n *= 2;
	}
	n = (uint64_t)(n * (ms * 1e6 / (t1 - t0)));
	for (int r = 0; r < 5; r++) {
		t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		sink = spin_iters(n, r);
		t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (t1 - t0 < best)
			best = t1 - t0;
	}
	ns_per_iter = (double)best / n;

	/* One fake launch, end to end, through the exported entry point. */
	fakecuda_config(&iters, &kus, &nodes);
	launches = (int)(ms * 1e6 / (iters * ns_per_iter + 100));
	if (launches < 100)
		launches = 100;
	t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < launches; i++)
		cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
	t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);

	printf("spin_ns_per_iter=%.3f\n", ns_per_iter);
	printf("iters_for_5us=%.0f\n", 5000 / ns_per_iter);
	printf("iters_for_200us=%.0f\n", 200000 / ns_per_iter);
	printf("launch_iters=%llu\n", iters);
	printf("launch_cpu_us=%.2f\n", (t1 - t0) / 1e3 / launches);
	return 0;
}
