// SPDX-License-Identifier: GPL-2.0
/*
 * decode: stand-in for an LLM decode loop driving a GPU through libcuda.
 *
 * Per token, a dedicated launcher pthread (not main) issues --launches kernel
 * launches and then synchronizes, against the fake libcuda.so.1 (fakecuda/).
 * The fake GPU is slower than the launches, so the launcher mostly sleeps in
 * the sync; every bit of CPU it loses to other threads delays the next token
 * and leaves the "GPU" idle.  That is what scx_express's express lane is for.
 *
 *  --helpers K     adds K CPU-bound threads (helper-<i>) to the same process,
 *                  like a tokenizer/data-loader pool: only the launcher thread
 *                  should be classified, not its siblings (nor main).
 *  --dlopen        loads libcuda.so.1 with dlopen() at run time (after
 *                  --dlopen-delay-ms) instead of at exec.  build/decode links
 *                  libcuda.so.1, so it re-execs its sibling build/decode-dlopen
 *                  (same source, not linked against libcuda; same pid).
 *  --idle-after S  stops launching after S s and keeps the launcher thread
 *                  alive, sleeping, for --linger S2 s (demotion tests).
 *
 * Output: "launcher_tid=<tid>" first (flushed), then key=value lines, or with
 * --json a single JSON object on the last line.  The report is printed when
 * launching stops, i.e. before any --linger.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"
#include "fakecuda/fakecuda.h"

#define HELPER_CHUNK 10000ull

typedef void (*fnptr)(void);
typedef CUresult (*lk_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
			  unsigned, unsigned, unsigned, CUstream, void **,
			  void **);
typedef CUresult (*lkex_fn)(const CUlaunchConfig *, CUfunction, void **,
			    void **);
typedef CUresult (*graph_fn)(CUgraphExec, CUstream);
typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*ctx_fn)(void);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*memcpy_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*init_fn)(unsigned);
typedef void (*config_fn)(unsigned long long *, unsigned long long *,
			  unsigned long long *);
typedef void (*late_fn)(unsigned long long *, unsigned long long *,
			unsigned long long *);

#ifdef DECODE_DLOPEN_ONLY
#define LINKED(fn) NULL
#else
#define LINKED(fn) ((fnptr)(fn))
#endif

enum sig { S_LK, S_LKEX, S_GRAPH, S_STREAM, S_CTX, S_DTOH, S_MEMCPY };

struct api {
	const char *name;
	enum sig sig;
	bool launch;
	fnptr linked;
};

static const struct api apis[] = {
	{ "cuLaunchKernel", S_LK, true, LINKED(cuLaunchKernel) },
	{ "cuLaunchKernel_ptsz", S_LK, true, LINKED(cuLaunchKernel_ptsz) },
	{ "cuLaunchKernelEx", S_LKEX, true, LINKED(cuLaunchKernelEx) },
	{ "cuLaunchKernelEx_ptsz", S_LKEX, true, LINKED(cuLaunchKernelEx_ptsz) },
	{ "cuGraphLaunch", S_GRAPH, true, LINKED(cuGraphLaunch) },
	{ "cuGraphLaunch_ptsz", S_GRAPH, true, LINKED(cuGraphLaunch_ptsz) },
	{ "cuStreamSynchronize", S_STREAM, false, LINKED(cuStreamSynchronize) },
	{ "cuStreamSynchronize_ptsz", S_STREAM, false,
	  LINKED(cuStreamSynchronize_ptsz) },
	{ "cuCtxSynchronize", S_CTX, false, LINKED(cuCtxSynchronize) },
	{ "cuEventSynchronize", S_STREAM, false, LINKED(cuEventSynchronize) },
	{ "cuMemcpyDtoHAsync_v2", S_DTOH, false, LINKED(cuMemcpyDtoHAsync_v2) },
	{ "cuMemcpyDtoHAsync_v2_ptsz", S_DTOH, false,
	  LINKED(cuMemcpyDtoHAsync_v2_ptsz) },
	{ "cuMemcpyAsync", S_MEMCPY, false, LINKED(cuMemcpyAsync) },
	{ "cuMemcpyAsync_ptsz", S_MEMCPY, false, LINKED(cuMemcpyAsync_ptsz) },
};

static struct {
	unsigned long long tokens, warmup, launches, helpers, dlopen_delay_ms;
	double duration, idle_after, linger;
	const char *launcher_name, *launch_name, *sync_name, *lib, *go_file;
	bool json, dlopen;
} opt = {
	.warmup = 10, .launches = 100, .launcher_name = "launcher",
	.launch_name = "cuLaunchKernel", .sync_name = "cuStreamSynchronize",
	.lib = "libcuda.so.1",
};

static const struct api *launch_api, *sync_api;
static fnptr launch_ptr, sync_ptr;
static unsigned long long cfg_iters, cfg_kernel_us, cfg_nodes;
/* fakecuda_sync_late(), when the library has it (only the fake one does). */
static late_fn sync_late;

/* The sleeping syncs' lateness counters at one moment (fakecuda.c). */
struct late {
	unsigned long long n, ns, over_1ms;
};

static struct late late_now(void)
{
	struct late l = { 0, 0, 0 };

	if (sync_late)
		sync_late(&l.n, &l.ns, &l.over_1ms);
	return l;
}

struct helper {
	uint64_t iters;			/* updated with relaxed atomics */
	char pad[64 - sizeof(uint64_t)];
};
static struct helper *helpers;
static volatile uint64_t sink;

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
"usage: decode [options]\n"
"  --tokens N            measured tokens (default 500 if no duration given)\n"
"  --duration S          measure for S seconds instead (SIGUSR1 ends it\n"
"                        early, with the report)\n"
"  --warmup N            unmeasured tokens first (default 10)\n"
"  --launches N          kernel launches per token (default 100)\n"
"  --helpers K           K CPU-bound sibling threads helper-<i> (default 0)\n"
"  --launcher-name NAME  launcher thread name (default launcher)\n"
"  --launch-fn SYM       launch entry point (default cuLaunchKernel; also\n"
"                        cuLaunchKernel_ptsz, cuLaunchKernelEx[_ptsz],\n"
"                        cuGraphLaunch[_ptsz])\n"
"  --sync-fn SYM         per-token wait (default cuStreamSynchronize; also\n"
"                        *_ptsz, cuCtxSynchronize, cuEventSynchronize,\n"
"                        cuMemcpyDtoHAsync_v2[_ptsz], cuMemcpyAsync[_ptsz])\n"
"  --dlopen              dlopen libcuda.so.1 at run time (decode-dlopen)\n"
"  --dlopen-delay-ms MS  wait before dlopen (default 0)\n"
"  --lib PATH            library to dlopen (default libcuda.so.1)\n"
"  --idle-after S        stop launching after S seconds ...\n"
"  --linger S            ... then keep the launcher alive, asleep, S seconds\n"
"  --go-file PATH        after printing launcher_tid, wait (up to 60 s)\n"
"                        until PATH exists before the first launch,\n"
"                        syncing every 100 ms meanwhile\n"
"  --json                JSON report (last line of stdout)\n"
"env: FAKECUDA_LAUNCH_ITERS, FAKECUDA_KERNEL_US, FAKECUDA_GRAPH_NODES\n");
	exit(rc);
}

static const struct api *find_api(const char *name, bool launch)
{
	for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++)
		if (!strcmp(apis[i].name, name) && apis[i].launch == launch)
			return &apis[i];
	fprintf(stderr, "unknown %s function '%s'\n", launch ? "launch" : "sync",
		name);
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	enum { O_TOKENS = 256, O_DURATION, O_WARMUP, O_LAUNCHES, O_HELPERS,
	       O_LNAME, O_LFN, O_SFN, O_DLOPEN, O_DELAY, O_LIB, O_IDLE,
	       O_LINGER, O_JSON, O_GO };
	static const struct option lopts[] = {
		{ "tokens", 1, 0, O_TOKENS }, { "duration", 1, 0, O_DURATION },
		{ "warmup", 1, 0, O_WARMUP }, { "launches", 1, 0, O_LAUNCHES },
		{ "helpers", 1, 0, O_HELPERS },
		{ "launcher-name", 1, 0, O_LNAME },
		{ "launch-fn", 1, 0, O_LFN }, { "sync-fn", 1, 0, O_SFN },
		{ "dlopen", 0, 0, O_DLOPEN },
		{ "dlopen-delay-ms", 1, 0, O_DELAY }, { "lib", 1, 0, O_LIB },
		{ "idle-after", 1, 0, O_IDLE }, { "linger", 1, 0, O_LINGER },
		{ "json", 0, 0, O_JSON }, { "go-file", 1, 0, O_GO },
		{ "help", 0, 0, 'h' }, { 0 },
	};
	int c, li = 0;

	while ((c = getopt_long(argc, argv, "h", lopts, &li)) != -1) {
		const char *n = lopts[li].name;

		switch (c) {
		case O_TOKENS: opt.tokens = parse_ull(n, optarg); break;
		case O_DURATION: opt.duration = parse_double(n, optarg); break;
		case O_WARMUP: opt.warmup = parse_ull(n, optarg); break;
		case O_LAUNCHES: opt.launches = parse_ull(n, optarg); break;
		case O_HELPERS: opt.helpers = parse_ull(n, optarg); break;
		case O_LNAME: opt.launcher_name = optarg; break;
		case O_LFN: opt.launch_name = optarg; break;
		case O_SFN: opt.sync_name = optarg; break;
		case O_DLOPEN: opt.dlopen = true; break;
		case O_DELAY: opt.dlopen_delay_ms = parse_ull(n, optarg); break;
		case O_LIB: opt.lib = optarg; break;
		case O_IDLE: opt.idle_after = parse_double(n, optarg); break;
		case O_LINGER: opt.linger = parse_double(n, optarg); break;
		case O_JSON: opt.json = true; break;
		case O_GO: opt.go_file = optarg; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (optind != argc)
		usage(2);
	if (strlen(opt.launcher_name) > 15) {
		fprintf(stderr, "--launcher-name: at most 15 characters\n");
		exit(2);
	}
	if (opt.idle_after > 0 && (opt.duration == 0 || opt.idle_after < opt.duration))
		opt.duration = opt.idle_after;
	if (!opt.tokens && opt.duration <= 0)
		opt.tokens = 500;
	launch_api = find_api(opt.launch_name, true);
	sync_api = find_api(opt.sync_name, false);
#ifdef DECODE_DLOPEN_ONLY
	opt.dlopen = true;
#endif
}

#ifndef DECODE_DLOPEN_ONLY
/* build/decode has libcuda.so.1 in DT_NEEDED; hand --dlopen to decode-dlopen. */
static void reexec_dlopen(char **argv)
{
	char self[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = 0;
	} else if (strchr(argv[0], '/')) {	/* no /proc: trust argv[0] */
		snprintf(self, sizeof(self), "%s", argv[0]);
	} else {
		execvp("decode-dlopen", argv);
		perror("exec decode-dlopen");
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/decode-dlopen", dirname(self));
	execv(path, argv);
	fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
	exit(1);
}
#endif

static fnptr resolve(void *h, const struct api *a)
{
	fnptr p;

	if (!h)
		return a->linked;
	p = (fnptr)dlsym(h, a->name);
	if (!p) {
		fprintf(stderr, "dlsym %s: %s\n", a->name, dlerror());
		exit(1);
	}
	return p;
}

/* Load (or just bind) the fake driver and pick the entry points. */
static void setup_cuda(void)
{
	void *h = NULL;
#ifdef DECODE_DLOPEN_ONLY
	init_fn init = NULL;
	config_fn config = NULL;
#else
	init_fn init = cuInit;
	config_fn config = fakecuda_config;

	sync_late = fakecuda_sync_late;
#endif

	if (opt.dlopen) {
		uint64_t t0 = now_ns();

		sleep_ns(opt.dlopen_delay_ms * 1000000ull);
		h = dlopen(opt.lib, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen %s: %s\n", opt.lib, dlerror());
			exit(1);
		}
		init = (init_fn)dlsym(h, "cuInit");
		config = (config_fn)dlsym(h, "fakecuda_config");
		sync_late = (late_fn)dlsym(h, "fakecuda_sync_late");
		printf("dlopen_done_ms=%.1f\n", (now_ns() - t0) / 1e6);
		fflush(stdout);
	}
	launch_ptr = resolve(h, launch_api);
	sync_ptr = resolve(h, sync_api);
	if (init)
		init(0);
	if (config)
		config(&cfg_iters, &cfg_kernel_us, &cfg_nodes);
}

static void do_launch(void)
{
	static char fn_dummy;
	CUfunction f = &fn_dummy;

	switch (launch_api->sig) {
	case S_LK:
		((lk_fn)launch_ptr)(f, 32, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
		break;
	case S_LKEX:
		((lkex_fn)launch_ptr)(NULL, f, NULL, NULL);
		break;
	default:
		((graph_fn)launch_ptr)(NULL, NULL);
		break;
	}
}

static void do_sync(void)
{
	static char token_buf[8];

	switch (sync_api->sig) {
	case S_CTX:
		((ctx_fn)sync_ptr)();
		break;
	case S_DTOH:
		((dtoh_fn)sync_ptr)(token_buf, 0x1000, sizeof(token_buf), NULL);
		break;
	case S_MEMCPY:
		((memcpy_fn)sync_ptr)(0x2000, 0x1000, sizeof(token_buf), NULL);
		break;
	default:
		((stream_fn)sync_ptr)(NULL);
		break;
	}
}

static uint64_t one_token(void)
{
	uint64_t t0 = now_ns();

	for (unsigned long long i = 0; i < opt.launches; i++)
		do_launch();
	do_sync();
	return now_ns() - t0;
}

static uint64_t helper_total(void)
{
	uint64_t sum = 0;

	for (unsigned long long i = 0; i < opt.helpers; i++)
		sum += __atomic_load_n(&helpers[i].iters, __ATOMIC_RELAXED);
	return sum;
}

static void *helper_main(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	char name[16];

	snprintf(name, sizeof(name), "helper-%u", (unsigned)i);
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		sink = spin_iters(HELPER_CHUNK, i);
		__atomic_fetch_add(&helpers[i].iters, HELPER_CHUNK,
				   __ATOMIC_RELAXED);
	}
	return NULL;
}

static void report(const struct samples *lat, double secs, pid_t tid,
		   const struct rusage *r0, const struct rusage *r1,
		   double helper_ips, struct late l0, struct late l1)
{
	/* Sleeping syncs in the measured seconds, and how late they woke. */
	unsigned long long late_n = l1.n - l0.n;
	unsigned long long late_1ms = l1.over_1ms - l0.over_1ms;
	double late_mean_us = late_n ? (l1.ns - l0.ns) / 1e3 / late_n : 0;
	double tps = secs > 0 ? lat->n / secs : 0;
	unsigned long long launches = lat->n * opt.launches;
	unsigned long long kernels = launch_api->sig == S_GRAPH ?
				     launches * cfg_nodes : launches;
	double gpu_busy = secs > 0 ? kernels * cfg_kernel_us / 1e6 / secs : 0;
	long nvcsw = r1->ru_nvcsw - r0->ru_nvcsw;
	long nivcsw = r1->ru_nivcsw - r0->ru_nivcsw;
	double cpu_ms = tv_ms(r1->ru_utime) + tv_ms(r1->ru_stime) -
			tv_ms(r0->ru_utime) - tv_ms(r0->ru_stime);

	if (opt.json) {
		printf("{\"workload\":\"decode\",\"mode\":\"%s\",\"pid\":%d,"
		       "\"main_tid\":%d,\"launcher_tid\":%d,"
		       "\"launcher_name\":\"%s\",\"launch_fn\":\"%s\","
		       "\"sync_fn\":\"%s\",\"tokens\":%zu,\"duration_s\":%.3f,"
		       "\"tok_per_s\":%.2f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
		       "\"max_us\":%.1f,\"mean_us\":%.1f,\"launches\":%llu,"
		       "\"launches_per_token\":%llu,\"gpu_busy_frac\":%.3f,"
		       "\"launcher_nvcsw\":%ld,\"launcher_nivcsw\":%ld,"
		       "\"launcher_cpu_ms\":%.1f,\"helpers\":%llu,"
		       "\"helper_iters_per_s\":%.0f,\"launch_iters\":%llu,"
		       "\"kernel_us\":%llu,\"sync_sleeps\":%llu,"
		       "\"sync_late_mean_us\":%.1f,\"sync_late_over_1ms\":%llu}\n",
		       opt.dlopen ? "dlopen" : "linked", getpid(), getpid(), tid,
		       opt.launcher_name, launch_api->name, sync_api->name,
		       lat->n, secs, tps, samples_pct_us(lat, 0.50),
		       samples_pct_us(lat, 0.99), samples_pct_us(lat, 1.0),
		       samples_mean_us(lat), launches, opt.launches, gpu_busy,
		       nvcsw, nivcsw, cpu_ms, opt.helpers, helper_ips,
		       cfg_iters, cfg_kernel_us, late_n, late_mean_us, late_1ms);
	} else {
		printf("mode=%s\npid=%d\nmain_tid=%d\nlauncher_tid=%d\n"
		       "launch_fn=%s\nsync_fn=%s\ntokens=%zu\nduration_s=%.3f\n"
		       "tok_per_s=%.2f\np50_us=%.1f\np99_us=%.1f\nmax_us=%.1f\n"
		       "mean_us=%.1f\nlaunches=%llu\ngpu_busy_frac=%.3f\n"
		       "launcher_nvcsw=%ld\nlauncher_nivcsw=%ld\n"
		       "launcher_cpu_ms=%.1f\nhelpers=%llu\n"
		       "helper_iters_per_s=%.0f\nlaunch_iters=%llu\n"
		       "kernel_us=%llu\nsync_sleeps=%llu\n"
		       "sync_late_mean_us=%.1f\nsync_late_over_1ms=%llu\n",
		       opt.dlopen ? "dlopen" : "linked", getpid(), getpid(), tid,
		       launch_api->name, sync_api->name, lat->n, secs, tps,
		       samples_pct_us(lat, 0.50), samples_pct_us(lat, 0.99),
		       samples_pct_us(lat, 1.0), samples_mean_us(lat), launches,
		       gpu_busy, nvcsw, nivcsw, cpu_ms, opt.helpers, helper_ips,
		       cfg_iters, cfg_kernel_us, late_n, late_mean_us, late_1ms);
	}
	fflush(stdout);
}

/*
 * --go-file: the bench's scale cell starts its launchers, marks its agents
 * (seconds under TCG), then creates the go file. A launcher idle that long
 * after mapping libcuda.so.1 looks unclassified to scx_express, which then
 * attaches its launch probes for a window (src/discovery.rs): ~1 us a
 * launch natively, but a trap costs ~160 us under TCG, and a window that
 * landed in the measured seconds cost the launchers 11-18% of their tok/s
 * (docs/benchmarks.md, "Launch windows in the scale cell"). So it syncs
 * from the start, as the decode cell's launcher does: one sync every 100
 * ms (idle_demote_ms is 2 s), every 20th of the wait's 5 ms polls.
 */
static void sync_now_and_then(void)
{
	static unsigned int polls;

	if (polls++ % 20 == 0)
		do_sync();
}

static void *launcher_main(void *arg)
{
	pid_t tid = gettid();
	struct samples lat = { 0 };
	struct rusage r0, r1;
	struct late l0, l1;
	uint64_t t0, t1, h0, end_ns;

	(void)arg;
	pthread_setname_np(pthread_self(), opt.launcher_name);
	printf("launcher_tid=%d\n", tid);
	fflush(stdout);
	/* Start with the bench's other workloads (the scale cell). */
	setup_cuda();
	wait_for_file_doing(opt.go_file, "decode", sync_now_and_then);
	for (unsigned long long i = 0; i < opt.warmup; i++)
		one_token();

	getrusage(RUSAGE_THREAD, &r0);
	h0 = helper_total();
	l0 = late_now();
	t0 = now_ns();
	end_ns = opt.duration > 0 ? t0 + (uint64_t)(opt.duration * 1e9) : 0;
	for (;;) {
		samples_add(&lat, one_token());
		if (opt.tokens && lat.n >= opt.tokens)
			break;
		if (end_ns && now_ns() >= end_ns)
			break;
		if (measure_stop)
			break;
	}
	t1 = now_ns();
	l1 = late_now();
	getrusage(RUSAGE_THREAD, &r1);

	samples_sort(&lat);
	report(&lat, (t1 - t0) / 1e9, tid, &r0, &r1,
	       (helper_total() - h0) / ((t1 - t0) / 1e9), l0, l1);
	free(lat.v);

	if (opt.linger > 0) {
		fprintf(stderr, "decode: launcher %d idle for %.1fs\n", tid,
			opt.linger);
		sleep_ns((uint64_t)(opt.linger * 1e9));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t lt;

	parse_args(argc, argv);
#ifndef DECODE_DLOPEN_ONLY
	if (opt.dlopen)
		reexec_dlopen(argv);
#endif
	measure_stop_init();
	helpers = calloc(opt.helpers ? opt.helpers : 1, sizeof(*helpers));
	for (unsigned long long i = 0; i < opt.helpers; i++) {
		pthread_t ht;

		if (pthread_create(&ht, NULL, helper_main, (void *)(uintptr_t)i)) {
			perror("pthread_create helper");
			return 1;
		}
	}
	if (pthread_create(&lt, NULL, launcher_main, NULL)) {
		perror("pthread_create launcher");
		return 1;
	}
	measure_stop_take();
	pthread_join(lt, NULL);
	return 0;	/* exit() also ends the helpers */
}
