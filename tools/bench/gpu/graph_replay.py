#!/usr/bin/env python3
"""CUDA graph capture and replay: a few decoder-like layers (matmuls and
elementwise ops) captured once with torch.cuda.graph, then replayed in a
loop; each iteration is one replay (one cudaGraphLaunch) and a sync.
Reports replays/s.

  python3 tools/bench/gpu/graph_replay.py --duration 8 --profile 5
"""

import torch
import torch.nn.functional as F

from common import emit, now_ns, parser, profile, start, timed


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    start()
    torch.cuda.init()
    emit(event="first_cuda_launch", t_ns=now_ns())
    dev, dt, d = "cuda", torch.float16, 1024
    ws = [(torch.randn(3072, d, device=dev, dtype=dt) * 0.02,
           torch.randn(d, 3072, device=dev, dtype=dt) * 0.02) for _ in range(args.layers)]
    static_in = torch.randn(8, d, device=dev, dtype=dt)

    def body(x):
        for up, down in ws:
            x = x + F.linear(F.silu(F.linear(x, up)), down)
            x = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dt)
        return x

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = body(static_in)

    def step():
        g.replay()
        torch.cuda.synchronize()

    if args.profile:
        profile(step, args.profile, torch)
    timed(step, args, torch, unit="replay")
    emit(event="check", out_norm=float(static_out.float().norm()))


if __name__ == "__main__":
    main()
