/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small helpers shared by the scx_express test workloads (header only).
 *
 * spin_iters() is the unit of "CPU work" used everywhere (fake launches,
 * agent bursts, helper threads, hogs).  It is a serial xorshift chain, so its
 * cost per iteration is fixed by instruction latency (no vectorisation, no
 * closed form) and lost CPU shows up as lost iterations, not as wall time.
 * Run build/calibrate to see its cost on a given machine.
 */
#ifndef EXPRESS_WORKLOADS_COMMON_H
#define EXPRESS_WORKLOADS_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Run n iterations of CPU work; returns a value the caller should consume. */
static inline uint64_t spin_iters(uint64_t n, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		__asm__ volatile("" : "+r"(x)); /* keep the chain opaque */
	}
	return x;
}

static inline uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* Sleep for ns nanoseconds (relative, CLOCK_MONOTONIC), restarting on EINTR. */
static inline void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000ull,
			       .tv_nsec = ns % 1000000000ull };

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/*
 * SIGUSR1 ends a measurement early (decode, agent): the loop finishes its
 * current token or step and reports as if its --duration were up, then the
 * program exits as usual. A VM test gives a stand-in a run that outlasts
 * its checks with room for a slow start under emulation, and sends it
 * SIGUSR1 once the checks are done, rather than waiting out that room,
 * 15-20 s per test (tests/vm/guest-lib.sh, finish_standins).
 *
 * Only the main thread takes the signal. measure_stop_init() blocks it
 * before any other thread exists, so every thread (and every process they
 * fork and exec) inherits a mask that blocks it, and no blocking call of
 * theirs (epoll_wait, futex, nanosleep) ever returns EINTR for it;
 * measure_stop_take() then unblocks it in main, which only waits.
 */
static volatile sig_atomic_t measure_stop;
static sigset_t measure_stop_mask;

static void on_measure_stop(int sig)
{
	(void)sig;
	measure_stop = 1;
}

static inline void measure_stop_init(void)
{
	struct sigaction sa = { .sa_handler = on_measure_stop,
				.sa_flags = SA_RESTART };

	sigemptyset(&measure_stop_mask);
	sigaddset(&measure_stop_mask, SIGUSR1);
	sigaction(SIGUSR1, &sa, NULL);
	pthread_sigmask(SIG_BLOCK, &measure_stop_mask, NULL);
}

static inline void measure_stop_take(void)
{
	pthread_sigmask(SIG_UNBLOCK, &measure_stop_mask, NULL);
}

static inline double tv_ms(struct timeval tv)
{
	return tv.tv_sec * 1e3 + tv.tv_usec / 1e3;
}

/* Growable array of nanosecond samples. */
struct samples {
	uint64_t *v;
	size_t n, cap;
};

static inline void samples_add(struct samples *s, uint64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v) {
			perror("realloc");
			exit(1);
		}
	}
	s->v[s->n++] = x;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static inline void samples_sort(struct samples *s)
{
	if (s->n)
		qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
}

/* Nearest-rank percentile (p in [0,1]) of a sorted sample set, in µs. */
static inline double samples_pct_us(const struct samples *s, double p)
{
	size_t idx;

	if (!s->n)
		return 0;
	idx = (size_t)(p * s->n + 0.999999);
	idx = idx ? idx - 1 : 0;
	if (idx >= s->n)
		idx = s->n - 1;
	return s->v[idx] / 1e3;
}

static inline double samples_mean_us(const struct samples *s)
{
	double sum = 0;

	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return s->n ? sum / s->n / 1e3 : 0;
}

/* Strict numeric option parsing: exits with a message on garbage. */
static inline unsigned long long parse_ull(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-') {
		fprintf(stderr, "invalid value for %s: '%s'\n", opt, s);
		exit(2);
	}
	return v;
}

static inline double parse_double(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < 0) {
		fprintf(stderr, "invalid value for %s: '%s'\n", opt, s);
		exit(2);
	}
	return v;
}

/*
 * --go-file PATH: wait (up to 60 s) until PATH exists, so that the caller
 * can classify the threads just printed before the measurement starts (a
 * `scx_express mark` takes most of a second under an emulator, and the
 * bench starts several workloads at once). NULL: no wait. @each, if set,
 * runs before every 5 ms poll (decode.c keeps its launcher syncing).
 */
static inline void wait_for_file_doing(const char *path, const char *who,
				       void (*each)(void))
{
	uint64_t deadline = now_ns() + 60ULL * 1000000000ULL;

	if (!path)
		return;
	while (access(path, F_OK)) {
		if (now_ns() > deadline) {
			fprintf(stderr, "%s: no %s after 60 s\n", who, path);
			exit(1);
		}
		if (each)
			each();
		sleep_ns(5 * 1000000ULL);
	}
}

static inline void wait_for_file(const char *path, const char *who)
{
	wait_for_file_doing(path, who, NULL);
}

/*
 * The agent stand-in's tool reply (agent.c; tool.c sends the same over a
 * pipe): what one write of a reply cost the sender, its share of the
 * local tail.
 */
struct write_cost {
	uint64_t ns;			/* wall time */
	uint64_t cpu_ns;		/* the sending thread's CPU time in it */
	uint32_t nvcsw;			/* voluntary context switches (blocked) */
	uint32_t nivcsw;		/* involuntary ones (preempted) */
};

struct reply {
	uint64_t seq;
	uint64_t send_ns;		/* sender's CLOCK_MONOTONIC, before write */
	struct write_cost prev_write;	/* the previous reply's write */
};

/* Exactly n bytes, or false on EOF/error. */
static inline bool read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		got += r;
	}
	return true;
}

static inline bool write_full(int fd, const void *buf, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = write(fd, (const char *)buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		done += r;
	}
	return true;
}

#endif
