#!/usr/bin/python3
"""PyTorch eager baseline for shardlm's training throughput (CPU, fp32).

Trains a randomly initialised Llama (tests/ref/llama_ref.py, untied
head) on random tokens with torch.optim.AdamW (foreach=False) and
clip_grad_norm_(1.0), on --threads threads; the first 2 steps are warmup and
not timed. Prints one JSON line:
  {"tokens_per_s", "step_s", "step_cpu_s", "params", "flops_per_token",
   "model_tflops", ...}
FLOP convention (field guide): flops_per_token = 6*N + 12*l*h*T, where N
counts every parameter except the input embedding table (so the lm_head
counts, as do norms), l = layers, h = hidden size, T = sequence length.
Recomputation would not count (there is none here). "params" is the total
parameter count, embedding included.

Run with Debian's /usr/bin/python3 (the one with torch), e.g.
  /usr/bin/python3 tools/bench_torch.py --hidden 384 --layers 6 --heads 6 \
      --kv-heads 2 --intermediate 1024 --vocab 8192 --batch 8 --seq 256 \
      --steps 5 --threads 2
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
import llama_ref as L  # noqa: E402

WARMUP = 2


def main():
    ap = argparse.ArgumentParser(description="PyTorch eager Llama training throughput")
    for k in ("hidden", "layers", "heads", "kv-heads", "intermediate", "vocab", "batch", "seq",
              "steps", "threads"):
        ap.add_argument("--" + k, type=int, required=k not in ("steps", "threads", "kv-heads"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    steps = a.steps or 5
    threads = a.threads or 2
    kv = a.kv_heads or a.heads
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)

    cfg = L.make_config(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=kv,
                        intermediate=a.intermediate, vocab=a.vocab, tied=False)
    m = L.init_model(cfg, seed=a.seed)
    params = sum(p.numel() for p in m.parameters())
    n_flop = params - m.model.embed_tokens.weight.numel()
    flops_per_token = 6 * n_flop + 12 * a.layers * a.hidden * a.seq
    opt = L.make_optimizer(m, 3e-4, 0.1, 0.9, 0.95, 1e-8)
    plist = list(m.parameters())
    g = torch.Generator().manual_seed(a.seed + 1)

    times, cpu = [], []
    for s in range(WARMUP + steps):
        tok = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = L.loss_fn(m(tok[:, :-1]), tok[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if s >= WARMUP:
            times.append(dt)
            cpu.append(dc)
        print(f"step {s + 1}{' (warmup)' if s < WARMUP else ''}: loss {loss.item():.4f} "
              f"{dt:.3f}s", file=sys.stderr, flush=True)

    step_s = sum(times) / len(times)
    tps = a.batch * a.seq / step_s
    print(json.dumps({
        "tokens_per_s": round(tps, 2),
        "step_s": round(step_s, 4),
        # CPU seconds of this process per step: on a shared machine,
        # batch*seq*threads/step_cpu_s estimates the uncontended tokens/s
        "step_cpu_s": round(sum(cpu) / len(cpu), 4),
        "params": params,
        "flops_per_token": flops_per_token,
        "flops_convention": "6*N + 12*l*h*T, N = all params except the input embedding (lm_head counted)",
        "model_tflops": round(tps * flops_per_token / 1e12, 4),
        "threads": threads,
        "batch": a.batch,
        "seq": a.seq,
        "timed_steps": len(times),
        "torch": torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
