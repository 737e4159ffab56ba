/*
 * mark_demo: a thread that opts into a class through libexpress_mark.so,
 * then waits and bursts like an agent loop. For the classification tests.
 *   mark_demo [agent|gpu|none] [SECONDS]
 * Prints "tid=<TID>" of the marked thread, then runs SECONDS (default 10).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "express_mark.h"

static const char *class_name = "agent";
static int seconds = 10;

static void *loop(void *arg)
{
	volatile unsigned long sink = 0;
	time_t end = time(NULL) + seconds;

	(void)arg;
	pthread_setname_np(pthread_self(), "agent-loop");
	if (!strcmp(class_name, "agent"))
		express_mark_agent();
	else if (!strcmp(class_name, "gpu"))
		express_mark_gpu();
	printf("tid=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	while (time(NULL) < end) {
		usleep(2000);	/* wait for a "tool reply" */
		for (int i = 0; i < 100000; i++)	/* short burst */
			sink += i;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc > 1)
		class_name = argv[1];
	if (argc > 2)
		seconds = atoi(argv[2]);
	pthread_create(&t, NULL, loop, NULL);
	pthread_join(t, NULL);
	return 0;
}
