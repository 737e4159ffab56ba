// SPDX-License-Identifier: GPL-2.0
/*
 * hog: a plain CPU hog, the "everything else" on a busy machine, and the
 * probe for weight tests (e.g. nice 0 vs nice 5 pinned to one CPU should
 * split it about 3:1, 1024 vs 335 in the kernel's weight table).
 *
 *   hog [--nice N] [--cpu C] [--duration S] [--json]
 *
 * Prints "pid=<pid>" at once (flushed), spins until --duration elapses or it
 * gets SIGTERM/SIGINT, then prints the iterations done, its CPU time and
 * max_gap_ms: the longest time between the ends of two chunks, which is
 * the longest it waited for a CPU (plus one chunk).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

#define CHUNK 10000ull		/* ~16 us; stop/time checks between chunks */

static volatile sig_atomic_t stop;
static volatile uint64_t sink;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: hog [--nice N] [--cpu C] [--duration S] [--json]\n");
	exit(rc);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "nice", 1, 0, 'n' }, { "cpu", 1, 0, 'c' },
		{ "duration", 1, 0, 'd' }, { "json", 0, 0, 'j' },
		{ "help", 0, 0, 'h' }, { 0 },
	};
	struct sigaction sa = { .sa_handler = on_signal };
	bool json = false, set_nice = false;
	long cpu = -1, nice_val = 0;
	double duration = 0;
	uint64_t iters = 0, t0, end_ns, last, t, max_gap = 0;
	struct rusage ru;
	double secs, cpu_ms;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			nice_val = strtol(optarg, &end, 0);
			if (*end || end == optarg || nice_val < -20 || nice_val > 19)
				usage(2);
			set_nice = true;
			break;
		case 'c': cpu = (long)parse_ull("cpu", optarg); break;
		case 'd': duration = parse_double("duration", optarg); break;
		case 'j': json = true; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (optind != argc)
		usage(2);

	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			perror("sched_setaffinity");
			return 1;
		}
	}
	if (set_nice && setpriority(PRIO_PROCESS, 0, nice_val)) {
		perror("setpriority");
		return 1;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	printf("pid=%d\n", getpid());
	fflush(stdout);

	t0 = now_ns();
	end_ns = duration > 0 ? t0 + (uint64_t)(duration * 1e9) : 0;
	last = t0;
	while (!stop && (!end_ns || last < end_ns)) {
		sink = spin_iters(CHUNK, iters);
		iters += CHUNK;
		t = now_ns();
		if (t - last > max_gap)
			max_gap = t - last;
		last = t;
	}
	secs = (now_ns() - t0) / 1e9;
	getrusage(RUSAGE_SELF, &ru);
	cpu_ms = tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);

	printf(json ? "{\"workload\":\"hog\",\"pid\":%d,\"nice\":%ld,"
		      "\"cpu\":%ld,\"iters\":%llu,\"elapsed_s\":%.3f,"
		      "\"utime_ms\":%.1f,\"stime_ms\":%.1f,\"cpu_ms\":%.1f,"
		      "\"nivcsw\":%ld,\"max_gap_ms\":%.1f}\n" :
		      "pid=%d\nnice=%ld\ncpu=%ld\niters=%llu\nelapsed_s=%.3f\n"
		      "utime_ms=%.1f\nstime_ms=%.1f\ncpu_ms=%.1f\nnivcsw=%ld\n"
		      "max_gap_ms=%.1f\n",
	       getpid(), (long)getpriority(PRIO_PROCESS, 0), cpu,
	       (unsigned long long)iters, secs, tv_ms(ru.ru_utime),
	       tv_ms(ru.ru_stime), cpu_ms, ru.ru_nivcsw, max_gap / 1e6);
	return 0;
}
