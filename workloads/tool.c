// SPDX-License-Identifier: GPL-2.0
/*
 * tool: the short-lived tool program of `agent --tool exec`, a stand-in for
 * the subprocess an agent runs per tool call (a grep, a formatter, a
 * script). Each run is one fork + exec by the agent; it reads --file in
 * full into fresh memory (file I/O and page faults), waits --delay-us (the
 * tool's own work, as the socket tool server's reply delay), then writes a
 * struct reply (common.h) with its CLOCK_MONOTONIC send time to stdout (the
 * agent's pipe), and after it a struct write_cost: what that write cost,
 * which the agent reads once it has timed the reply.
 *
 *   tool --seq N [--file PATH] [--delay-us US]
 *
 * PATH defaults to this program's own executable. Exit 0 on success.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/resource.h>

#include "common.h"

/* Reads PATH to its end into fresh pages; returns a checksum of it. */
static uint64_t read_file(const char *path)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	uint64_t sum = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (!buf || fd < 0) {
		perror(path);
		exit(1);
	}
	while ((r = read(fd, buf + len, cap - len)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror(path);
			exit(1);
		}
		len += r;
		if (len == cap) /* a bigger file: reread over the same pages */
			len = 0;
	}
	close(fd);
	for (size_t i = 0; i < len; i += 64)
		sum = sum * 31 + (unsigned char)buf[i];
	free(buf);
	return sum;
}

int main(int argc, char **argv)
{
	const char *file = "/proc/self/exe";
	unsigned long long seq = 0, delay_us = 0;
	struct reply r = { 0 };
	struct write_cost w = { 0 };
	struct rusage u0, u1;
	uint64_t cpu0;
	volatile uint64_t sum;

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc) {
			fprintf(stderr, "usage: tool --seq N [--file PATH] [--delay-us US]\n");
			return 2;
		}
		if (!strcmp(argv[i], "--seq"))
			seq = parse_ull(argv[i], argv[i + 1]);
		else if (!strcmp(argv[i], "--file"))
			file = argv[i + 1];
		else if (!strcmp(argv[i], "--delay-us"))
			delay_us = parse_ull(argv[i], argv[i + 1]);
		else {
			fprintf(stderr, "tool: unknown option %s\n", argv[i]);
			return 2;
		}
		i++;
	}
	sum = read_file(file);
	(void)sum;
	sleep_ns(delay_us * 1000);
	r.seq = seq;
	r.send_ns = now_ns();
	cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	getrusage(RUSAGE_THREAD, &u0);
	if (!write_full(1, &r, sizeof(r)))
		return 1;
	getrusage(RUSAGE_THREAD, &u1);
	w.ns = now_ns() - r.send_ns;
	w.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	w.nvcsw = u1.ru_nvcsw - u0.ru_nvcsw;
	w.nivcsw = u1.ru_nivcsw - u0.ru_nivcsw;
	return write_full(1, &w, sizeof(w)) ? 0 : 1;
}
