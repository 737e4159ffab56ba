"""Shared helpers of the GPU workloads in tools/bench/gpu.

Every workload prints JSON lines on stdout (flushed): a "start" line with its
pid and launcher thread id, a "profile" line if --profile N was given, and a
"result" line with the timed window (CLOCK_MONOTONIC ns, the clock of
bpf_ktime_get_ns, so they line up with `scx_express trace` timestamps) and
the launching thread's CPU time in it, as a fraction of one CPU.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

# Kernel-launch entry points as the profiler names them (runtime and driver API).
LAUNCH_APIS = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchKernelEx",
    "__cudaLaunchKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
    "cuGraphLaunch",
}


def now_ns():
    return time.monotonic_ns()


def emit(**kv):
    print(json.dumps(kv), flush=True)


def parser(desc):
    ap = argparse.ArgumentParser(description=desc)
    ap.add_argument("--duration", type=float, default=10.0, help="timed seconds")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations first")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="first count kernel launches of N iterations with torch.profiler",
    )
    ap.add_argument(
        "--iter-times",
        metavar="FILE",
        help="write each timed iteration's end (monotonic ns), one a line",
    )
    return ap


def start():
    emit(event="start", pid=os.getpid(), tid=threading.get_native_id(),
         comm=open("/proc/thread-self/comm").read().strip())


def profile(step, n, torch):
    """Counts, per iteration, GPU kernels and launch API calls seen by the
    profiler over n iterations of step()."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    from torch.autograd import DeviceType

    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    kernels = 0
    apis = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            if not e.name.startswith(("Memcpy", "Memset")):
                kernels += 1
        elif e.name in LAUNCH_APIS:
            apis[e.name] = apis.get(e.name, 0) + 1
    emit(event="profile", iterations=n, kernels_per_iter=kernels / n,
         launch_api_per_iter=sum(apis.values()) / n,
         launch_apis={k: v / n for k, v in sorted(apis.items())})


def timed(step, args, torch, unit="iter"):
    """Runs step() for --duration seconds after --warmup, or until SIGTERM
    or SIGINT; prints the result."""
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    ends = []
    cpu0 = time.thread_time_ns()
    t0 = now_ns()
    emit(event="timed_start", t0_ns=t0)
    deadline = t0 + int(args.duration * 1e9)
    while True:
        step()
        t = now_ns()
        ends.append(t)
        if t >= deadline or stop:
            break
    t1 = ends[-1]
    cpu1 = time.thread_time_ns()
    n = len(ends)
    if args.iter_times:
        with open(args.iter_times, "w") as f:
            f.write("\n".join(str(t) for t in ends) + "\n")
    # The launching thread's CPU time over the timed window, as a fraction
    # of one CPU: what an express-lane budget (classes.gpu.rate) must cover.
    emit(event="result", unit=unit, iterations=n, t0_ns=t0, t1_ns=t1,
         per_s=n / ((t1 - t0) / 1e9), launcher_cpu_frac=(cpu1 - cpu0) / (t1 - t0))
    sys.stdout.flush()
