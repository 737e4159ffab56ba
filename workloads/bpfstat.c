// SPDX-License-Identifier: GPL-2.0
/*
 * bpfstat: the run count and total run time of every loaded BPF program
 * that has run, one "name run_cnt run_time_ns" line each. The kernel
 * counts only while the sysctl kernel.bpf_stats_enabled is 1. A measuring
 * tool for tools/bench/vm/wakeup-cost.sh, not a stand-in: two snapshots
 * around a phase give each program's runs and mean cost in it.
 */
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

int main(void)
{
	struct bpf_prog_info info;
	union bpf_attr attr;
	__u32 id = 0;
	int fd;

	for (;;) {
		memset(&attr, 0, sizeof(attr));
		attr.start_id = id;
		if (sys_bpf(BPF_PROG_GET_NEXT_ID, &attr))
			break;
		id = attr.next_id;
		memset(&attr, 0, sizeof(attr));
		attr.prog_id = id;
		fd = sys_bpf(BPF_PROG_GET_FD_BY_ID, &attr);
		if (fd < 0)
			continue;
		memset(&info, 0, sizeof(info));
		memset(&attr, 0, sizeof(attr));
		attr.info.bpf_fd = fd;
		attr.info.info_len = sizeof(info);
		attr.info.info = (__u64)(unsigned long)&info;
		if (!sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) && info.run_cnt)
			printf("%s %llu %llu\n", info.name, (unsigned long long)info.run_cnt,
			       (unsigned long long)info.run_time_ns);
		close(fd);
	}
	return 0;
}
