#!/usr/bin/env python3
"""Compare two training runs: per-step losses (metrics JSONL) and the saved
parameters (safetensors in an HF directory), with a relative tolerance or
bit-exactly (--exact). Exit 0 when they agree, 1 otherwise; prints the
worst difference either way.

The weight criterion is each tensor's relative L2 difference
||a - b|| / ||b||, not its largest element difference: AdamW turns the
round-off of a near-zero gradient (another summation order: TP, another
OpenBLAS kernel, another thread count) into an lr-sized step of that one
element, so the largest element difference measures Adam's sign of noise,
not the run (measured: up to 1.5e-5 of max|w| between layouts; the L2
figure stays at or below 2.8e-6). A real defect (a wrong gradient, a lost micro-batch)
moves whole tensors and shows in the L2 figure (docs/CONTRIBUTING.md,
"Tolerances"). The largest element difference is still printed.
SL_NOISE_LOG=FILE appends one JSON line per comparison (the figures) for
noise measurements.

usage: compare.py RUN_A RUN_B [--rtol 1e-5] [--wtol W] [--wtol-tensor SUBSTR:W] [--exact] [--loss-only]
                  [--plant KIND] [--tail]

--tail: RUN_A resumed from a checkpoint of RUN_B's run, so its metrics hold
only the last steps: they are compared with RUN_B's last ones.

--rtol bounds the per-step losses' relative difference; --wtol each weight
tensor's relative L2 difference (default: the larger of --rtol and 10 x the
worst noise measured: WTOL below, 5e-5).

--wtol-tensor SUBSTR:W: the tensors whose name contains SUBSTR are held to W
instead (reported on their own line), for a tensor whose gradient is nearly
zero by construction, e.g. a k_proj bias (exactly zero without RoPE:
softmax ignores a constant per query), so AdamW's normalised step turns its
summation-order noise into the whole tensor's update.

--plant KIND: the negative control. Plants an error into RUN_A's weights
before comparing (the test then expects FAIL): "norm" adds 2e-3 (2 x lr,
the step of an update gone the wrong way, as a sum over TP applied to an
accumulated buffer did) to every norm weight; "row" scales one row of the
largest matrix by 1 + 1e-2 (one output channel's update off by a few
steps).
RUN is a directory holding metrics.jsonl and model/ (model.safetensors)."""
import json
import os
import struct
import sys

import numpy as np


# the worst relative L2 weight difference measured between layouts that sum in
# another order (TP 2 x PP 2 with tied embeddings: 1.51e-6, 2.77e-6 under
# OPENBLAS_CORETYPE=Sandybridge), over OpenBLAS core types and thread counts
# (docs/CONTRIBUTING.md, "Tolerances"); the default bound is 18x that
WTOL_NOISE = 2.77e-6
WTOL = 5e-5


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
    # the weights' relative L2 bound: WTOL_NOISE (the worst measured) x 10, or --rtol where larger
    wtol = float(args[args.index("--wtol") + 1]) if "--wtol" in args else max(rtol, WTOL)
    skip = {i + 1 for i, x in enumerate(args) if x in ("--rtol", "--wtol", "--plant", "--wtol-tensor")}
    own = {}  # --wtol-tensor SUBSTR:W
    for i, x in enumerate(args):
        if x == "--wtol-tensor":
            sub, tol = args[i + 1].rsplit(":", 1)
            own[sub] = float(tol)
    a, b = [x for i, x in enumerate(args) if not x.startswith("--") and i not in skip][:2]
    la, lb = losses(a + "/metrics.jsonl"), losses(b + "/metrics.jsonl")
    ok = True
    if "--tail" in args and len(la) < len(lb):  # a resumed run: its steps are b's last ones
        lb = lb[len(lb) - len(la) :]
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
    if "--plant" in args:
        kind = args[args.index("--plant") + 1]
        if kind == "norm":
            for k in pa:
                if "norm" in k:
                    pa[k] = pa[k] + np.float32(2e-3)
        elif kind == "row":
            k = max(pa, key=lambda n: pa[n].size if pa[n].ndim == 2 else 0)
            pa[k] = pa[k].copy()
            pa[k][pa[k].shape[0] // 2] *= np.float32(1 + 1e-2)
        else:
            print(f"unknown --plant {kind}")
            return 2
    worst_p, worst_name, worst_max = 0.0, "", 0.0
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
        d = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-12)
        sub = next((t for t in own if t in k), None)
        if sub is not None:
            ok &= d <= own[sub]
            print(f"{'OK  ' if d <= own[sub] else 'FAIL'} {k}: weights L2 {d:.3g} (its own bound {own[sub]:g})")
            continue
        worst_max = max(worst_max, np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-12))
        if d > worst_p:
            worst_p, worst_name = d, k
    if not exact:
        ok &= worst_p <= wtol
    if os.environ.get("SL_NOISE_LOG"):
        with open(os.environ["SL_NOISE_LOG"], "a") as f:
            f.write(json.dumps({"a": a, "b": b, "exact": exact, "loss": worst_loss, "l2": worst_p,
                                "max": 0.0 if exact else float(worst_max), "tensor": worst_name}) + "\n")
    mode = "bit-exact" if exact else f"losses rtol {rtol:g}, weights L2 {wtol:g}"
    extra = "" if exact else f" (largest element diff {worst_max:.3g} of max|w|)"
    print(f"{'OK  ' if ok else 'FAIL'} {a} vs {b} ({mode}): worst loss diff {worst_loss:.3g}, "
          f"worst param diff {worst_p:.3g} {worst_name}{extra}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
