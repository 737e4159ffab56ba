// Cost of one uprobe hit, measured against an identical unprobed function in
// the same loop, so host noise hits both sides alike.
//
//   probe_cost SECONDS
//
// Alternates 20 ms slices calling express_probe_target() and
// express_plain_target() (same code), and prints one JSON line a second:
// ns per call of each, over that second. Attach a probe to the first with a
// marker in the config (library "probe_cost", symbol express_probe_target),
// e.g. `scx_express trace --config marker.toml`; the difference is the hit's
// cost. Build: gcc -O2 -rdynamic -o probe_cost probe_cost.c
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline, used)) long express_probe_target(long x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

__attribute__((noinline, used)) long express_plain_target(long x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Calls f for about 20 ms; returns the calls made, adds the time to *ns. */
static long slice(long (*f)(long), long long *ns)
{
	long long t0 = now_ns(), t;
	long calls = 0, x = 0;

	do {
		for (int i = 0; i < 256; i++)
			x = f(x);
		calls += 256;
		t = now_ns();
	} while (t - t0 < 20000000LL);
	*ns += t - t0;
	return calls + (x & 0);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	long long end = now_ns() + (long long)(secs * 1e9);

	printf("{\"event\":\"start\",\"pid\":%d}\n", (int)getpid());
	fflush(stdout);
	while (now_ns() < end) {
		long long ns_p = 0, ns_q = 0, t0 = now_ns();
		long n_p = 0, n_q = 0;

		while (now_ns() - t0 < 1000000000LL) {
			n_p += slice(express_probe_target, &ns_p);
			n_q += slice(express_plain_target, &ns_q);
		}
		printf("{\"t_ns\":%lld,\"probed_ns\":%.2f,\"plain_ns\":%.2f}\n",
		       now_ns(), (double)ns_p / n_p, (double)ns_q / n_q);
		fflush(stdout);
	}
	return 0;
}
