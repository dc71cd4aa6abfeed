#!/usr/bin/env python3
"""Compare two training runs: per-step losses (metrics JSONL) and the saved
parameters (safetensors in an HF directory), with a relative tolerance or
bit-exactly (--exact). Exit 0 when they agree, 1 otherwise; prints the
worst difference either way.

usage: compare.py RUN_A RUN_B [--rtol 1e-5] [--exact] [--loss-only]
RUN is a directory holding metrics.jsonl and model/ (model.safetensors)."""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[base + b : base + e], dtype="<f4").reshape(info["shape"])
    return out


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def main():
    args = sys.argv[1:]
    rtol = 1e-5
    exact = "--exact" in args
    if "--rtol" in args:
        rtol = float(args[args.index("--rtol") + 1])
    a, b = [x for x in args if not x.startswith("--") and not x.replace(".", "").replace("e-", "").isdigit()][:2]
    la, lb = losses(a + "/metrics.jsonl"), losses(b + "/metrics.jsonl")
    ok = True
    if len(la) != len(lb):
        print(f"step count differs: {len(la)} vs {len(lb)}")
        return 1
    worst_loss = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb))
    if exact:
        ok &= la == lb
    else:
        ok &= worst_loss <= rtol
    if "--loss-only" in args:
        ok = worst_loss <= rtol
        print(f"{'OK  ' if ok else 'FAIL'} {a} vs {b} (losses, rtol {rtol:g}): worst loss diff {worst_loss:.3g}")
        return 0 if ok else 1
    pa = read_safetensors(a + "/model/model.safetensors")
    pb = read_safetensors(b + "/model/model.safetensors")
    if sorted(pa) != sorted(pb):
        print("tensor names differ")
        return 1
    worst_p, worst_name = 0.0, ""
    for k in pa:
        x, y = pa[k].astype(np.float64), pb[k].astype(np.float64)
        if x.shape != y.shape:
            print(f"{k}: shape {x.shape} vs {y.shape}")
            return 1
        if exact:
            if not np.array_equal(pa[k].view(np.uint32), pb[k].view(np.uint32)):
                ok = False
                d = np.max(np.abs(x - y))
                if d >= worst_p:
                    worst_p, worst_name = d, k
            continue
        d = np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-12)
        if d > worst_p:
            worst_p, worst_name = d, k
    if not exact:
        ok &= worst_p <= rtol
    mode = "bit-exact" if exact else f"rtol {rtol:g}"
    print(f"{'OK  ' if ok else 'FAIL'} {a} vs {b} ({mode}): worst loss diff {worst_loss:.3g}, "
          f"worst param diff {worst_p:.3g} {worst_name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
