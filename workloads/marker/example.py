#!/usr/bin/env python3
"""Opting a Python agent loop into scx_express's agent class.

scx_express puts a uprobe on express_mark_agent() in libexpress_mark.so;
the thread that calls it gets the agent class (the mark is per thread), and
express_unmark() drops it.  Here a worker thread marks itself, runs a toy
agent loop (wait for a "tool", then think), and unmarks on the way out.

    python3 example.py [steps]
Library: $EXPRESS_MARK_LIB, else ../build/libexpress_mark.so next to this
file, else the dynamic loader's search path.
"""
import ctypes
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_marker():
    for path in (os.environ.get("EXPRESS_MARK_LIB"),
                 os.path.join(HERE, "..", "build", "libexpress_mark.so"),
                 "libexpress_mark.so"):
        if path and (os.path.exists(path) or "/" not in path):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    sys.exit("libexpress_mark.so not found (build it: make -C workloads)")


def set_thread_name(name):
    """Set the kernel-visible name (comm) of the calling thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NAME = 15
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def agent_loop(mark, steps):
    set_thread_name("agent-loop")
    mark.express_mark_agent()          # this thread -> agent class
    print(f"agent_tid={threading.get_native_id()}", flush=True)
    try:
        worst = 0.0
        for _ in range(steps):
            t0 = time.monotonic()
            time.sleep(0.002)           # waiting for a tool / model reply
            late = time.monotonic() - t0 - 0.002
            worst = max(worst, late)
            sum(i * i for i in range(2000))   # "think": a short CPU burst
        print(f"steps={steps} worst_wakeup_late_us={worst * 1e6:.0f}")
    finally:
        mark.express_unmark()          # back to a normal thread


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    mark = load_marker()
    for fn in ("express_mark_agent", "express_mark_gpu", "express_unmark"):
        getattr(mark, fn).restype = None
        getattr(mark, fn).argtypes = []
    t = threading.Thread(target=agent_loop, args=(mark, steps))
    t.start()
    t.join()


if __name__ == "__main__":
    main()
