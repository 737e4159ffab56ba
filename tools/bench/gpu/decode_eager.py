#!/usr/bin/env python3
"""Eager fp16 decode loop with Qwen3-0.6B shapes and random weights.

One token = 28 decoder layers run op by op (RMSNorm, q/k/v projections,
q/k norms, RoPE, KV-cache write, grouped-query attention, output projection,
SwiGLU MLP), the LM head and a greedy argmax read back to the CPU (.item(),
a sync), all from the Python main thread: about 800+ kernel launches per
token, the CPU-bound launch pattern of eager inference. Reports tokens/s.

  python3 tools/bench/gpu/decode_eager.py --duration 10 --profile 5
"""

import torch
import torch.nn.functional as F

from common import emit, now_ns, parser, profile, start, timed

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 1024, 16, 8, 128, 3072, 151936


def rms_norm(x, w, eps=1e-6):
    # As transformers' Qwen3RMSNorm does it, op by op.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--ctx", type=int, default=256, help="KV-cache slots attended")
    args = ap.parse_args()
    start()
    torch.cuda.init()
    dev, dt = "cuda", torch.float16
    emit(event="first_cuda_launch", t_ns=now_ns())

    def w(*shape):
        return (torch.randn(*shape, device=dev, dtype=dt) * 0.02)

    emb = w(VOCAB, HIDDEN)
    layers = []
    for _ in range(args.layers):
        layers.append(dict(
            ln1=torch.ones(HIDDEN, device=dev, dtype=dt),
            ln2=torch.ones(HIDDEN, device=dev, dtype=dt),
            wq=w(HEADS * HEAD_DIM, HIDDEN), wk=w(KV_HEADS * HEAD_DIM, HIDDEN),
            wv=w(KV_HEADS * HEAD_DIM, HIDDEN), wo=w(HIDDEN, HEADS * HEAD_DIM),
            qn=torch.ones(HEAD_DIM, device=dev, dtype=dt),
            kn=torch.ones(HEAD_DIM, device=dev, dtype=dt),
            wg=w(INTER, HIDDEN), wu=w(INTER, HIDDEN), wd=w(HIDDEN, INTER),
            kc=torch.zeros(1, KV_HEADS, args.ctx, HEAD_DIM, device=dev, dtype=dt),
            vc=torch.zeros(1, KV_HEADS, args.ctx, HEAD_DIM, device=dev, dtype=dt),
        ))
    norm = torch.ones(HIDDEN, device=dev, dtype=dt)
    inv = 1.0 / (1e6 ** (torch.arange(0, HEAD_DIM, 2, device=dev).float() / HEAD_DIM))
    state = {"tok": 1, "pos": 0}

    def step():
        pos = state["pos"]
        ang = torch.tensor([pos], device=dev, dtype=torch.float32)[:, None] * inv
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
        x = emb[state["tok"]].view(1, 1, HIDDEN)
        for L in layers:
            h = rms_norm(x, L["ln1"])
            q = F.linear(h, L["wq"]).view(1, 1, HEADS, HEAD_DIM)
            k = F.linear(h, L["wk"]).view(1, 1, KV_HEADS, HEAD_DIM)
            v = F.linear(h, L["wv"]).view(1, 1, KV_HEADS, HEAD_DIM)
            q = rms_norm(q, L["qn"]).transpose(1, 2)
            k = rms_norm(k, L["kn"]).transpose(1, 2)
            v = v.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            L["kc"][:, :, pos] = k[:, :, 0]
            L["vc"][:, :, pos] = v[:, :, 0]
            a = F.scaled_dot_product_attention(q, L["kc"], L["vc"], enable_gqa=True)
            a = a.transpose(1, 2).reshape(1, 1, HEADS * HEAD_DIM)
            x = x + F.linear(a, L["wo"])
            h = rms_norm(x, L["ln2"])
            x = x + F.linear(F.silu(F.linear(h, L["wg"])) * F.linear(h, L["wu"]), L["wd"])
        logits = F.linear(rms_norm(x, norm), emb)
        state["tok"] = int(logits.argmax(-1).item()) % VOCAB
        state["pos"] = (pos + 1) % args.ctx

    if args.profile:
        profile(step, args.profile, torch)
    timed(step, args, torch, unit="token")


if __name__ == "__main__":
    main()
