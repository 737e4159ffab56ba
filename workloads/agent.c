// SPDX-License-Identifier: GPL-2.0
/*
 * agent: stand-in for an AI-agent control loop talking to a local tool server.
 *
 * Each step the agent thread ("agent-loop") sends a request over TCP loopback,
 * blocks in epoll_wait, reads the reply, and then burns --burst-iters of CPU
 * (the "think" step).  The tool server sleeps --reply-delay-us and replies
 * with its CLOCK_MONOTONIC send time, so the agent can measure its
 *
 *     local tail = (time the agent has read the reply) - (server send time)
 *
 * i.e. wakeup + scheduling latency of the agent thread, which is what the
 * express lane should keep small when the machine is busy.
 *
 * Modes: default forks the server into its own process ("tool-server"), as
 * in reality; --threads runs it as a thread of this process instead;
 * --server-only / --client-only --port P run one side.
 *
 * --tool exec: no server; each step's tool call is a short subprocess, a
 * fork + exec of build/tool (tool.c), which reads a file, waits the reply
 * delay and writes the same struct reply to a pipe. The local tail has the
 * same definition (reply read - send time, now the tool's); the step also
 * pays the exec, the tool's page faults and file I/O, reported as
 * "tool_spawn_*_us" (fork to the reply's send time, the delay included).
 *
 * Output: "agent_tid=<tid>" and, in fork mode, "tool_server_pid=<pid>"
 * first (flushed), then key=value lines, or with
 * --json a single JSON object on the last line.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

#include "common.h"

struct request {
	uint64_t seq;
	uint64_t delay_us;		/* server sleeps this long, then replies */
};

static struct {
	unsigned long long steps, warmup, reply_delay_us, burst_iters, port;
	unsigned long long long_every, long_delay_us;
	double duration, warmup_max_s;
	bool json, cdf, threads, server_only, client_only, tool_exec;
	const char *go_file, *tool_path, *tool_file;
} opt = {
	.warmup = 20, .reply_delay_us = 2000, .long_delay_us = 20000,
	.burst_iters = 125000,		/* ~200 us at ~1.6 ns/iter */
};

static volatile uint64_t sink;

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
"usage: agent [options]\n"
"  --steps N            measured steps (default 1000 if no duration given)\n"
"  --duration S         measure for S seconds instead (SIGUSR1 ends it\n"
"                       early, with the report)\n"
"  --warmup N           unmeasured steps first (default 20)\n"
"  --warmup-max-s S     end the warmup after S seconds even if fewer than N\n"
"                       steps ran (default: no bound); under heavy noise a\n"
"                       step can take 10-100x its clean time\n"
"  --reply-delay-us US  tool-server delay per request, sent with each\n"
"                       request (default 2000)\n"
"  --long-every N       every Nth tool call takes --long-delay-us instead\n"
"                       (default 0: none): a slow call (a remote model)\n"
"                       among short local ones\n"
"  --long-delay-us US   that call's delay (default 20000)\n"
"  --burst-iters N      agent CPU burst per step (default 125000, ~200us)\n"
"  --threads            server as a thread of this process (default: fork)\n"
"  --server-only        only serve (prints server_port=P); runs until killed\n"
"  --client-only        only the agent; needs --port\n"
"  --port P             port (default: ephemeral)\n"
"  --tool socket|exec   tool call: the loopback server (default) or a\n"
"                       fork + exec of the tool program per step\n"
"  --tool-path PATH     with exec: the tool (default: tool beside agent)\n"
"  --tool-file PATH     with exec: the file it reads (default: itself)\n"
"  --go-file PATH       after printing the ids, wait (up to 60 s) until PATH\n"
"                       exists before the warmup: time to classify them\n"
"  --json               JSON report (last line of stdout)\n"
"  --cdf                with --json: add \"tail_cdf\", [quantile, us] pairs\n"
"                       of the local tail (for CDF plots)\n");
	exit(rc);
}

static void parse_args(int argc, char **argv)
{
	enum { O_STEPS = 256, O_DURATION, O_WARMUP, O_DELAY, O_BURST, O_THREADS,
	       O_SERVER, O_CLIENT, O_PORT, O_JSON, O_CDF, O_GO, O_TOOL,
	       O_TOOL_PATH, O_TOOL_FILE, O_WARMUP_MAX, O_LONG_EVERY, O_LONG_DELAY };
	static const struct option lopts[] = {
		{ "steps", 1, 0, O_STEPS }, { "duration", 1, 0, O_DURATION },
		{ "warmup", 1, 0, O_WARMUP },
		{ "warmup-max-s", 1, 0, O_WARMUP_MAX },
		{ "reply-delay-us", 1, 0, O_DELAY },
		{ "long-every", 1, 0, O_LONG_EVERY },
		{ "long-delay-us", 1, 0, O_LONG_DELAY },
		{ "burst-iters", 1, 0, O_BURST },
		{ "threads", 0, 0, O_THREADS },
		{ "server-only", 0, 0, O_SERVER },
		{ "client-only", 0, 0, O_CLIENT }, { "port", 1, 0, O_PORT },
		{ "json", 0, 0, O_JSON }, { "cdf", 0, 0, O_CDF },
		{ "go-file", 1, 0, O_GO }, { "tool", 1, 0, O_TOOL },
		{ "tool-path", 1, 0, O_TOOL_PATH },
		{ "tool-file", 1, 0, O_TOOL_FILE },
		{ "help", 0, 0, 'h' }, { 0 },
	};
	int c, li = 0;

	while ((c = getopt_long(argc, argv, "h", lopts, &li)) != -1) {
		const char *n = lopts[li].name;

		switch (c) {
		case O_STEPS: opt.steps = parse_ull(n, optarg); break;
		case O_DURATION: opt.duration = parse_double(n, optarg); break;
		case O_WARMUP: opt.warmup = parse_ull(n, optarg); break;
		case O_WARMUP_MAX:
			opt.warmup_max_s = parse_double(n, optarg);
			break;
		case O_DELAY: opt.reply_delay_us = parse_ull(n, optarg); break;
		case O_LONG_EVERY: opt.long_every = parse_ull(n, optarg); break;
		case O_LONG_DELAY: opt.long_delay_us = parse_ull(n, optarg); break;
		case O_BURST: opt.burst_iters = parse_ull(n, optarg); break;
		case O_THREADS: opt.threads = true; break;
		case O_SERVER: opt.server_only = true; break;
		case O_CLIENT: opt.client_only = true; break;
		case O_PORT: opt.port = parse_ull(n, optarg); break;
		case O_JSON: opt.json = true; break;
		case O_CDF: opt.cdf = true; break;
		case O_GO: opt.go_file = optarg; break;
		case O_TOOL:
			if (strcmp(optarg, "exec") && strcmp(optarg, "socket"))
				usage(2);
			opt.tool_exec = !strcmp(optarg, "exec");
			break;
		case O_TOOL_PATH: opt.tool_path = optarg; break;
		case O_TOOL_FILE: opt.tool_file = optarg; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (optind != argc || opt.port > 65535 ||
	    (opt.server_only && opt.client_only) ||
	    (opt.client_only && !opt.port) ||
	    (opt.tool_exec && (opt.threads || opt.server_only || opt.client_only)))
		usage(2);
	if (!opt.steps && opt.duration <= 0)
		opt.steps = 1000;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void set_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int listen_loopback(unsigned port, unsigned *bound)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16))
		die("bind/listen 127.0.0.1");
	if (getsockname(fd, (struct sockaddr *)&a, &len))
		die("getsockname");
	*bound = ntohs(a.sin_port);
	return fd;
}

/* Tool server, one connection: struct request in, struct reply out. */
static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct request q;
	struct write_cost last = { 0 };
	struct rusage u0, u1;
	uint64_t cpu0;

	pthread_setname_np(pthread_self(), "tool-server");
	set_nodelay(fd);
	while (read_full(fd, &q, sizeof(q))) {
		struct reply r = { .seq = q.seq, .prev_write = last };

		sleep_ns(q.delay_us * 1000);
		r.send_ns = now_ns();
		cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		getrusage(RUSAGE_THREAD, &u0);
		if (!write_full(fd, &r, sizeof(r)))
			break;
		getrusage(RUSAGE_THREAD, &u1);
		last.ns = now_ns() - r.send_ns;
		last.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
		last.nvcsw = u1.ru_nvcsw - u0.ru_nvcsw;
		last.nivcsw = u1.ru_nivcsw - u0.ru_nivcsw;
	}
	close(fd);
	return NULL;
}

/* Accept connections forever, a thread each (--server-only). */
static void serve_forever(int lfd)
{
	for (;;) {
		pthread_t t;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			die("accept");
		}
		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd))
			die("pthread_create");
		pthread_detach(t);
	}
}

static void *serve_one(void *arg)
{
	int fd = accept4((int)(intptr_t)arg, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		die("accept");
	return serve_conn((void *)(intptr_t)fd);
}

static int connect_loopback(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect 127.0.0.1");
	set_nodelay(fd);
	return fd;
}

static pid_t server_pid;

struct step_times {
	uint64_t tail, rtt;
	/*
	 * Thread CPU time of the think step: fixed work, so its rise under
	 * load is the machine running code slower (an emulator's busy vCPUs),
	 * not scheduling delay.
	 */
	uint64_t burst;
	/*
	 * The local tail in two: the server's send to epoll_wait's return in
	 * the agent (the send path, the wakeup, the switch to the agent), and
	 * from there to the reply read (the agent's own return and read()).
	 */
	uint64_t ready, recv;
	struct write_cost prev_write;	/* the server's write of the step before */
	uint64_t spawn;			/* --tool exec: fork to the reply's send */
};

/* The think step after a reply read at t_recv. */
static void think(uint64_t seq, uint64_t t_send, uint64_t t_ready, uint64_t t_recv,
		  const struct reply *r, struct step_times *t)
{
	uint64_t cpu0;

	t->tail = t_recv > r->send_ns ? t_recv - r->send_ns : 0;
	t->ready = t_ready > r->send_ns ? t_ready - r->send_ns : 0;
	t->recv = t_recv - t_ready;
	t->rtt = t_recv - t_send;
	t->prev_write = r->prev_write;
	cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	sink = spin_iters(opt.burst_iters, seq);	/* "think" */
	t->burst = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
}

static void wait_readable(int ep)
{
	struct epoll_event ev;
	int n;

	do
		n = epoll_wait(ep, &ev, 1, -1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("epoll_wait");
}

/* The tool program: --tool-path, else "tool" beside this executable. */
static const char *tool_path(void)
{
	static char path[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n;

	if (opt.tool_path)
		return opt.tool_path;
	if (!path[0]) {
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0)
			die("readlink /proc/self/exe");
		self[n] = 0;
		snprintf(path, sizeof(path), "%s/tool", dirname(self));
	}
	return path;
}

/*
 * One --tool exec step: fork + exec the tool with its stdout on a pipe,
 * wait for the reply as the socket step does, then reap it. The tool's
 * write cost comes after the reply (it knows it only then) and is kept
 * for the next step, as the server sends the previous write's.
 */
/* Step @seq's tool delay (us): --long-every's steps take the long one. */
static uint64_t delay_of(uint64_t seq)
{
	return opt.long_every && seq % opt.long_every == 0 ? opt.long_delay_us :
							     opt.reply_delay_us;
}

static bool step_exec(int ep, uint64_t seq, struct step_times *t)
{
	static struct write_cost last;
	struct epoll_event ev = { .events = EPOLLIN };
	char seq_s[32], delay_s[32];
	uint64_t t_send, t_ready, t_recv;
	struct write_cost w;
	struct reply r;
	int p[2], st;
	pid_t pid;

	snprintf(seq_s, sizeof(seq_s), "%llu", (unsigned long long)seq);
	snprintf(delay_s, sizeof(delay_s), "%llu", (unsigned long long)delay_of(seq));
	if (pipe2(p, O_CLOEXEC))
		die("pipe2");
	t_send = now_ns();
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		dup2(p[1], 1);
		execl(tool_path(), "tool", "--seq", seq_s, "--delay-us", delay_s,
		      "--file", opt.tool_file ? opt.tool_file : tool_path(),
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	ev.data.fd = p[0];
	if (epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev))
		die("epoll_ctl");
	wait_readable(ep);
	t_ready = now_ns();
	if (!read_full(p[0], &r, sizeof(r)) || r.seq != seq)
		return false;
	t_recv = now_ns();
	r.prev_write = last;
	think(seq, t_send, t_ready, t_recv, &r, t);
	t->spawn = r.send_ns > t_send ? r.send_ns - t_send : 0;
	if (!read_full(p[0], &w, sizeof(w)))
		return false;
	last = w;
	close(p[0]);		/* also leaves the epoll set */
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return false;
	return true;
}

/* One agent step; returns false if the server (or tool) went away. */
static bool step(int fd, int ep, uint64_t seq, struct step_times *t)
{
	struct request q = { .seq = seq, .delay_us = delay_of(seq) };
	struct reply r;
	uint64_t t_send, t_ready, t_recv;

	if (opt.tool_exec)
		return step_exec(ep, seq, t);
	t_send = now_ns();
	if (!write_full(fd, &q, sizeof(q)))
		return false;
	wait_readable(ep);
	t_ready = now_ns();
	if (!read_full(fd, &r, sizeof(r)) || r.seq != seq)
		return false;
	t_recv = now_ns();
	think(seq, t_send, t_ready, t_recv, &r, t);
	return true;
}

/*
 * Steps whose local tail was over 1 ms; of those, how many spent over half
 * of it in the server's write (sending, not the agent's wakeup); and of
 * those, how many writes ran under half their time on the server's CPU
 * clock (off the CPU, or in IRQ handlers) rather than running slowly.
 */
struct slow {
	size_t over_1ms, server, server_off_cpu;
	size_t server_blocked, server_preempted;	/* switched out in it */
};

/*
 * Where the local tail went, by means (they add up): the two halves of
 * step_times, and the run delay (runnable, not running) the kernel's
 * schedstats give the loop and the server over the measured steps.
 */
struct split {
	struct samples ready, recv;
	uint64_t agent_delay_ns, server_delay_ns;
	/*
	 * The server thread's CPU time over the steps (the loop's own is
	 * agent_cpu_ms, from getrusage()), to tell its time from others' on
	 * its CPU.
	 */
	uint64_t server_run_ns;
	/* Migrations over the steps (-1: unknown), and the CPUs at the end. */
	long agent_migr, server_migr;
	int agent_cpu, server_cpu;
};

/* One thread's schedstat: time on a CPU and run delay (runnable, not running). */
struct sched_times {
	uint64_t run_ns, delay_ns;
};

/*
 * Task @tid of @pid's /proc/.../schedstat (its first two fields); zeros if
 * unreadable (no schedstats in this kernel).
 */
static struct sched_times sched_times_of(pid_t pid, pid_t tid)
{
	struct sched_times t = { 0, 0 };
	unsigned long long run, delay;
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
	f = fopen(path, "r");
	if (!f)
		return t;
	if (fscanf(f, "%llu %llu", &run, &delay) == 2) {
		t.run_ns = run;
		t.delay_ns = delay;
	}
	fclose(f);
	return t;
}

/*
 * The tool server's thread of @pid ("tool-server"): its tid, or 0.
 */
static pid_t server_tid(pid_t pid)
{
	char path[320], comm[32] = "";
	struct dirent *d;
	pid_t tid = 0;
	DIR *dir;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return 0;
	while (!tid && (d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, d->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f) && !strncmp(comm, "tool-server", 11))
			tid = (pid_t)atoi(d->d_name);
		if (f)
			fclose(f);
	}
	closedir(dir);
	return tid;
}

/* se.nr_migrations of @tid in @pid (/proc/.../sched), -1 if unreadable. */
static long migrations(pid_t pid, pid_t tid)
{
	char path[64], line[256];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/sched", (int)pid, (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "se.nr_migrations", 16) && strchr(line, ':'))
			n = atol(strchr(line, ':') + 1);
	fclose(f);
	return n;
}

/* The CPU @tid of @pid last ran on (/proc/.../stat field 39), -1 if unknown. */
static int last_cpu(pid_t pid, pid_t tid)
{
	char path[64], buf[1024], *p;
	int field = 2, cpu = -1;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	for (; p && *p; p++)
		if (*p == ' ' && ++field == 39) {
			cpu = atoi(p + 1);
			break;
		}
	return cpu;
}

static void report_split(const struct split *sp, const struct samples *wr, size_t steps)
{
	double n = steps ? (double)steps : 1;

	printf(opt.json ? ",\"tail_ready_p50_us\":%.1f,\"tail_ready_mean_us\":%.1f,"
			  "\"tail_recv_p50_us\":%.1f,\"tail_recv_mean_us\":%.1f,"
			  "\"server_write_mean_us\":%.1f,"
			  "\"agent_run_delay_per_step_us\":%.1f,"
			  "\"server_run_delay_per_step_us\":%.1f,"
			  "\"agent_migrations\":%ld,\"server_migrations\":%ld,"
			  "\"agent_cpu\":%d,\"server_cpu\":%d,\"server_run_ms\":%.1f" :
			  "tail_ready_p50_us=%.1f\ntail_ready_mean_us=%.1f\n"
			  "tail_recv_p50_us=%.1f\ntail_recv_mean_us=%.1f\n"
			  "server_write_mean_us=%.1f\n"
			  "agent_run_delay_per_step_us=%.1f\n"
			  "server_run_delay_per_step_us=%.1f\n"
			  "agent_migrations=%ld\nserver_migrations=%ld\n"
			  "agent_cpu=%d\nserver_cpu=%d\nserver_run_ms=%.1f\n",
	       samples_pct_us(&sp->ready, 0.50), samples_mean_us(&sp->ready),
	       samples_pct_us(&sp->recv, 0.50), samples_mean_us(&sp->recv),
	       samples_mean_us(wr), sp->agent_delay_ns / n / 1e3,
	       sp->server_delay_ns / n / 1e3, sp->agent_migr, sp->server_migr,
	       sp->agent_cpu, sp->server_cpu, sp->server_run_ns / 1e6);
}

static void report(const struct samples *tail, const struct samples *rtt,
		   const struct samples *burst, const struct samples *wr,
		   const struct samples *spawn, const struct slow *slow, double secs, pid_t tid, const struct rusage *r0,
		   const struct rusage *r1, const struct split *sp)
{
	double sps = secs > 0 ? tail->n / secs : 0;
	long nvcsw = r1->ru_nvcsw - r0->ru_nvcsw;
	long nivcsw = r1->ru_nivcsw - r0->ru_nivcsw;
	double cpu_ms = tv_ms(r1->ru_utime) + tv_ms(r1->ru_stime) -
			tv_ms(r0->ru_utime) - tv_ms(r0->ru_stime);
	const char *fmt = opt.json ?
		"{\"workload\":\"agent\",\"pid\":%d,\"agent_tid\":%d,"
		"\"server_pid\":%d,\"steps\":%zu,\"duration_s\":%.3f,"
		"\"steps_per_s\":%.2f,\"tail_p50_us\":%.1f,"
		"\"tail_p99_us\":%.1f,\"tail_p999_us\":%.1f,"
		"\"tail_max_us\":%.1f,\"tail_mean_us\":%.1f,"
		"\"rtt_p50_us\":%.1f,\"rtt_p99_us\":%.1f,"
		"\"agent_nvcsw\":%ld,\"agent_nivcsw\":%ld,"
		"\"agent_cpu_ms\":%.1f,\"reply_delay_us\":%llu,"
		"\"burst_iters\":%llu,\"burst_cpu_p50_us\":%.1f,"
		"\"server_write_p50_us\":%.1f,\"server_write_p99_us\":%.1f,"
		"\"tail_over_1ms\":%zu,\"tail_over_1ms_server\":%zu,"
		"\"tail_over_1ms_server_off_cpu\":%zu,"
		"\"tail_over_1ms_server_blocked\":%zu,"
		"\"tail_over_1ms_server_preempted\":%zu" :
		"pid=%d\nagent_tid=%d\nserver_pid=%d\nsteps=%zu\n"
		"duration_s=%.3f\nsteps_per_s=%.2f\ntail_p50_us=%.1f\n"
		"tail_p99_us=%.1f\ntail_p999_us=%.1f\ntail_max_us=%.1f\n"
		"tail_mean_us=%.1f\nrtt_p50_us=%.1f\nrtt_p99_us=%.1f\n"
		"agent_nvcsw=%ld\nagent_nivcsw=%ld\nagent_cpu_ms=%.1f\n"
		"reply_delay_us=%llu\nburst_iters=%llu\nburst_cpu_p50_us=%.1f\n"
		"server_write_p50_us=%.1f\nserver_write_p99_us=%.1f\n"
		"tail_over_1ms=%zu\ntail_over_1ms_server=%zu\n"
		"tail_over_1ms_server_off_cpu=%zu\n"
		"tail_over_1ms_server_blocked=%zu\n"
		"tail_over_1ms_server_preempted=%zu\n";

	printf(fmt, getpid(), tid, server_pid, tail->n, secs, sps,
	       samples_pct_us(tail, 0.50), samples_pct_us(tail, 0.99),
	       samples_pct_us(tail, 0.999), samples_pct_us(tail, 1.0),
	       samples_mean_us(tail), samples_pct_us(rtt, 0.50),
	       samples_pct_us(rtt, 0.99), nvcsw, nivcsw, cpu_ms,
	       opt.reply_delay_us, opt.burst_iters, samples_pct_us(burst, 0.50),
	       samples_pct_us(wr, 0.50), samples_pct_us(wr, 0.99),
	       slow->over_1ms, slow->server, slow->server_off_cpu,
	       slow->server_blocked, slow->server_preempted);
	if (opt.tool_exec)
		printf(opt.json ? ",\"tool\":\"exec\",\"tool_spawn_p50_us\":%.1f,"
				  "\"tool_spawn_p99_us\":%.1f" :
				  "tool=exec\ntool_spawn_p50_us=%.1f\n"
				  "tool_spawn_p99_us=%.1f\n",
		       samples_pct_us(spawn, 0.50), samples_pct_us(spawn, 0.99));
	report_split(sp, wr, tail->n);
	if (opt.json) {
		if (opt.cdf) {
			/* Denser towards the tail, where schedulers differ. */
			static const double q[] = {
				0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7,
				0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99,
				0.993, 0.995, 0.997, 0.998, 0.999, 0.9995,
				0.9999, 1.0,
			};

			printf(",\"tail_cdf\":[");
			for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
				printf("%s[%g,%.1f]", i ? "," : "", q[i],
				       samples_pct_us(tail, q[i]));
			printf("]");
		}
		printf("}\n");
	}
	fflush(stdout);
}

static void *agent_main(void *arg)
{
	int fd = (int)(intptr_t)arg, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	struct samples tail = { 0 }, rtt = { 0 }, burst = { 0 }, wr = { 0 };
	struct samples spawn = { 0 };
	struct split split = { 0 };
	struct sched_times at0, st0 = { 0, 0 }, at1, st1 = { 0, 0 };
	long migr0, smigr0 = -1;
	pid_t stid = 0;
	struct slow slow = { 0 };
	struct step_times st;
	struct rusage r0, r1;
	uint64_t seq = 0, t0, t1, end_ns, warm_end, last_tail = 0;
	pid_t tid = gettid();

	pthread_setname_np(pthread_self(), "agent-loop");
	printf("agent_tid=%d\n", tid);
	if (server_pid > 0)
		printf("tool_server_pid=%d\n", (int)server_pid);
	fflush(stdout);
	if (ep < 0 || (fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)))
		die("epoll");
	/* Hold the first step until the caller has classified us. */
	wait_for_file(opt.go_file, "agent");

	/* Bounded in time too: the caller plans its noise around the warmup
	 * (the bench's GO_WARMUP_S), and under CPU noise in a TCG guest a
	 * fork + exec step takes hundreds of ms: 20 of them took seconds,
	 * past the noise's end. */
	warm_end = opt.warmup_max_s > 0 ?
		now_ns() + (uint64_t)(opt.warmup_max_s * 1e9) : 0;
	for (unsigned long long i = 0; i < opt.warmup; i++) {
		if (!step(fd, ep, seq++, &st))
			goto lost;
		if (warm_end && now_ns() >= warm_end)
			break;
	}

	getrusage(RUSAGE_THREAD, &r0);
	at0 = sched_times_of(getpid(), tid);
	migr0 = migrations(getpid(), tid);
	if (server_pid > 0 && (stid = server_tid(server_pid))) {
		st0 = sched_times_of(server_pid, stid);
		smigr0 = migrations(server_pid, stid);
	}
	t0 = now_ns();
	end_ns = opt.duration > 0 ? t0 + (uint64_t)(opt.duration * 1e9) : 0;
	for (;;) {
		if (!step(fd, ep, seq++, &st))
			goto lost;
		samples_add(&tail, st.tail);
		samples_add(&rtt, st.rtt);
		samples_add(&burst, st.burst);
		samples_add(&split.ready, st.ready);
		samples_add(&split.recv, st.recv);
		if (opt.tool_exec)
			samples_add(&spawn, st.spawn);
		/* This reply says how long the last one's write took. */
		if (last_tail) {
			samples_add(&wr, st.prev_write.ns);
			if (last_tail > 1000000 && st.prev_write.ns * 2 > last_tail) {
				slow.server++;
				slow.server_off_cpu += st.prev_write.cpu_ns * 2 < st.prev_write.ns;
				slow.server_blocked += st.prev_write.nvcsw > 0;
				slow.server_preempted += st.prev_write.nivcsw > 0;
			}
			slow.over_1ms += last_tail > 1000000;
		}
		last_tail = st.tail ? st.tail : 1;
		if (opt.steps && tail.n >= opt.steps)
			break;
		if (end_ns && now_ns() >= end_ns)
			break;
		if (measure_stop)
			break;
	}
	t1 = now_ns();
	getrusage(RUSAGE_THREAD, &r1);
	at1 = sched_times_of(getpid(), tid);
	if (stid)
		st1 = sched_times_of(server_pid, stid);
	split.agent_delay_ns = at1.delay_ns - at0.delay_ns;
	split.server_delay_ns = st1.delay_ns - st0.delay_ns;
	split.server_run_ns = st1.run_ns - st0.run_ns;
	split.agent_migr = migr0 < 0 ? -1 : migrations(getpid(), tid) - migr0;
	split.server_migr = smigr0 < 0 ? -1 : migrations(server_pid, stid) - smigr0;
	split.agent_cpu = sched_getcpu();
	split.server_cpu = stid ? last_cpu(server_pid, stid) : -1;

	samples_sort(&tail);
	samples_sort(&rtt);
	samples_sort(&burst);
	samples_sort(&wr);
	samples_sort(&spawn);
	samples_sort(&split.ready);
	samples_sort(&split.recv);
	report(&tail, &rtt, &burst, &wr, &spawn, &slow, (t1 - t0) / 1e9, tid, &r0, &r1, &split);
	free(tail.v);
	free(rtt.v);
	free(burst.v);
	free(wr.v);
	free(spawn.v);
	free(split.ready.v);
	free(split.recv.v);
	close(ep);
	return NULL;
lost:
	fprintf(stderr, "agent: lost the tool server\n");
	exit(1);
}

int main(int argc, char **argv)
{
	unsigned port;
	pthread_t at, st;
	int lfd = -1, fd;

	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	measure_stop_init();
	port = opt.port;

	if (opt.tool_exec) {
		/* No server: each step forks the tool (step_exec), whose
		 * path is resolved here, not in every child. */
		tool_path();
		if (pthread_create(&at, NULL, agent_main, (void *)(intptr_t)-1))
			die("pthread_create");
		measure_stop_take();
		pthread_join(at, NULL);
		return 0;
	}
	if (!opt.client_only) {
		lfd = listen_loopback(port, &port);
		if (opt.server_only) {
			printf("server_port=%u\n", port);
			fflush(stdout);
			serve_forever(lfd);
		}
		if (opt.threads) {
			if (pthread_create(&st, NULL, serve_one,
					   (void *)(intptr_t)lfd))
				die("pthread_create");
		} else {
			/* Fork before any thread exists; the child serves one
			 * connection and dies with us. */
			server_pid = fork();
			if (server_pid < 0)
				die("fork");
			if (server_pid == 0) {
				prctl(PR_SET_PDEATHSIG, SIGTERM);
				prctl(PR_SET_NAME, "tool-server");
				serve_one((void *)(intptr_t)lfd);
				_exit(0);
			}
			close(lfd);
		}
	}

	fd = connect_loopback(port);
	if (pthread_create(&at, NULL, agent_main, (void *)(intptr_t)fd))
		die("pthread_create");
	measure_stop_take();
	pthread_join(at, NULL);
	close(fd);		/* server sees EOF and exits */
	if (opt.threads)
		pthread_join(st, NULL);
	if (server_pid > 0)
		waitpid(server_pid, NULL, 0);
	return 0;
}
