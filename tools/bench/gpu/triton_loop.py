#!/usr/bin/env python3
"""A Triton kernel launched in a loop: the driver-API launch path
(Triton's launcher calls cuLaunchKernelEx in libcuda directly, not libcudart).
One iteration = --launches launches of a small vector add, then
torch.cuda.synchronize(). Reports iterations/s.

  python3 tools/bench/gpu/triton_loop.py --duration 8 --profile 5
"""

import torch
import triton
import triton.language as tl

from common import emit, now_ns, parser, profile, start, timed


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--n", type=int, default=1 << 16)
    args = ap.parse_args()
    start()
    torch.cuda.init()
    emit(event="first_cuda_launch", t_ns=now_ns())
    x = torch.randn(args.n, device="cuda")
    y = torch.randn(args.n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(args.n, 1024),)

    def step():
        for _ in range(args.launches):
            add_kernel[grid](x, y, out, args.n, BLOCK=1024)
        torch.cuda.synchronize()

    step()  # compile
    if args.profile:
        profile(step, args.profile, torch)
    timed(step, args, torch)


if __name__ == "__main__":
    main()
