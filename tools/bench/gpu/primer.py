#!/usr/bin/env python3
"""Maps libcudart and libcuda, makes one launch and one sync, then sleeps:
run it first so a tracer or the scheduler already knows the CUDA libraries
when the workload under test starts (the steady state of a long-running
host)."""

import time

import torch

from common import emit, now_ns, start

start()
torch.cuda.init()
emit(event="first_cuda_launch", t_ns=now_ns())
torch.zeros(1, device="cuda").add_(1).item()
emit(event="done", t_ns=now_ns())
time.sleep(float(__import__("sys").argv[1]) if len(__import__("sys").argv) > 1 else 3)
