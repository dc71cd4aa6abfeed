"""tests/ref/nemotron_h_checks.py — the checks of tests/ref/test_torch_nemotron_h.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR."""
import argparse
import json
import os
import sys

import numpy as np
import torch

import common  # noqa: E402
import engine_checks as EC  # noqa: E402
import nemotron_h_ref as N  # noqa: E402

EC.L = N  # compare_training reloads the saved dir with EC.L.load_hf
_ap = argparse.ArgumentParser()
_ap.add_argument("--shardlm", required=True)
_ap.add_argument("--work", required=True)
_args = _ap.parse_args()
exe, w = os.path.abspath(_args.shardlm), os.path.abspath(_args.work)
torch.set_num_threads(2)
ck = EC.Checker()
data = os.path.join(w, "data")
stream = EC.make_data(data)
B, T, STEPS, HP = EC.B, EC.T, EC.STEPS, EC.HP
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]


def engine(args, log, pre=()):
    ok, msg = EC.run_engine(pre[0] if pre else exe, (list(pre[1:]) + [exe] if pre else []) + list(args),
                            os.path.join(w, log))
    if not ok:
        ck(f"shardlm {args[0]} ({log})", False, msg)
    return ok


def ref_rows(mdir):
    m = N.load_hf(mdir)
    return m, N.train(m, stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"], HP["wd"], HP["b1"],
                      HP["b2"], HP["eps"], HP["clip"])


def split_names(m):
    """(names compared relatively, names whose gradient is analytically zero: N.ZERO_GRAD)."""
    names = [n for n, _ in m.named_parameters()]
    return [n for n in names if not n.endswith(N.ZERO_GRAD)], [n for n in names if n.endswith(N.ZERO_GRAD)]


def zero_grads(label, path, ref, zero):
    """The analytically-zero gradients (the key biases without RoPE) of an engine dump: at most
    DUMP_TOL times the model's largest reference gradient (rounding, not a signal)."""
    if not zero or not path:
        return
    e = common.st_read(path)
    top = max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("grad."))
    worst = max(float(np.abs(e["grad." + n]).max()) if "grad." + n in e else float("inf") for n in zero)
    ck(f"{label}: the key-bias gradients, analytically zero without RoPE, are rounding "
       f"(<= {EC.DUMP_TOL:g} x the largest gradient {top:.2e})", worst <= EC.DUMP_TOL * top,
       f"max|grad| {worst:.1e}; PyTorch fp32 " + f"{max(float(np.abs(ref['grad.' + n]).max()) for n in zero):.1e}")


def compare_dump(label, path, ref, m):
    rel_names, zero = split_names(m)
    EC.compare_dump(ck, label, path, ref, rel_names)
    zero_grads(label, path, ref, zero)


def suite(tag, cfg, seed, layouts):
    mdir = os.path.join(w, "model_" + tag)
    N.save_hf(N.init_model(cfg, seed=seed), mdir)
    ref_m = N.load_hf(mdir)
    rel_names, zero = split_names(ref_m)
    ref = N.dump(ref_m, stream, B, T)
    ref64 = N.dump(N.load_hf(mdir, torch.float64), stream, B, T)
    noise = max(EC.rel_err(ref[k], ref64[k]) for k in ref if not k.endswith(N.ZERO_GRAD))
    label = (f"[{tag}] dump vs PyTorch: logits, loss, all grads ({EC.DUMP_TOL:g} rel; torch fp32 vs fp64 "
             f"{noise:.1e})")
    dumps = EC.dump_modes(ck, exe, w, mdir, data, ref, rel_names, label, tag)
    zero_grads(f"[{tag}] dump", dumps.get("none"), ref, zero)
    m, rows = ref_rows(mdir)
    nclip = sum(r["grad_norm"] > HP["clip"] for r in rows)
    ck(f"[{tag}] reference clipping active", nclip >= 1, f"{nclip}/{STEPS} steps; ref losses "
       + " ".join(f"{r['loss']:.4f}" for r in rows))
    for name, pre, extra in layouts:
        met, save = os.path.join(w, f"metrics_{tag}_{name}.jsonl"), os.path.join(w, f"saved_{tag}_{name}")
        args = EC.train_args(mdir, data, met, save, "none")
        if "ZeRO" in name:  # 2 data-parallel ranks: half the accumulation keeps the global batch (and the data order)
            args[args.index("--grad-accum") + 1] = EC.ACCUM // 2
        if engine(args + extra, f"train_{tag}_{name}.log", pre):
            EC.compare_training(ck, f"[{tag}] train {name}", met, save, rows, m)
    return mdir, dumps, ref


# ---- 1. hybrid: "M*M-" (two groups, GQA, untied); tied-bias-limit: "M-*" (one group, tied, every bias, a
# time_step_limit that clamps) -----------------------------------------------------------------------------
c1 = N.config_hybrid(EC.VOCAB)
d1, dumps1, ref1 = suite("hybrid", c1, 7, [("1 rank", (), []),
                                          ("2 ranks ZeRO-3", MPI, ["--zero", 3]),
                                          ("2 ranks --tp 2", MPI, ["--tp", 2]),
                                          ("2 ranks --tp 2 --sequence-parallel", MPI,
                                           ["--tp", 2, "--sequence-parallel"]),
                                          ("2 ranks --pp 2 (1f1b)", MPI, ["--pp", 2, "--pp-schedule", "1f1b"]),
                                          ("2 ranks --pp 2 (zb1p)", MPI, ["--pp", 2, "--pp-schedule", "zb1p"]),
                                          ("2 ranks ZeRO-3 CPU offload", MPI,
                                           ["--zero", 3, "--offload-optimizer", "cpu"]),
                                          ("1 rank --activation-checkpoint full", (),
                                           ["--activation-checkpoint", "full"])])
c2 = N.config_tied_bias(EC.VOCAB)
d2, dumps2, ref2 = suite("tied-bias-limit", c2, 8, [("1 rank", (), []),
                                                         ("2 ranks --pp 2 (1f1b)", MPI,
                                                          ["--pp", 2, "--pp-schedule", "1f1b"])])
with torch.no_grad():  # the clamp bites: some softplus(dt + dt_bias) outside [0.002, 0.06] in the first batch
    mm = N.load_hf(d2)
    x, _ = N.L.batch(stream, 0, B, T)
    mix = mm.backbone.layers[0].mixer
    zx = mix.in_proj(mm.backbone.layers[0].norm(mm.backbone.embeddings(x)))
    dt = torch.nn.functional.softplus(zx[..., -c2.mamba_num_heads:] + mix.dt_bias)
    lo, hi = int((dt < 0.002).sum()), int((dt > 0.06).sum())
    ck("[tied-bias-limit] time_step_limit clamps values at both ends (layer 0)", lo > 0 and hi > 0,
       f"{lo} below, {hi} above of {dt.numel()}")

# ---- 2. negative controls: RoPE in the attention layers; transformers' Mamba2 whole-width gated norm -----
for tag, mdir, dumps, variant, what in (
        ("hybrid", d1, dumps1, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layers"),
        ("tied-bias-limit", d2, dumps2, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layer"),
        ("hybrid", d1, dumps1, dict(norm_groups=1), "the whole-width gated norm (transformers' Mamba2) at n_groups 2")):
    if dumps.get("none"):
        r = N.dump(N.load_hf(mdir, **variant), stream, B, T)
        e = common.st_read(dumps["none"])
        err = EC.rel_err(e["logits"].reshape(r["logits"].shape), r["logits"])
        ck(f"[negative control] [{tag}] the reference with {what} differs from the engine", err > 100 * EC.DUMP_TOL,
           f"logits rel {err:.2e}")

# ---- 3. HF round trip (Python's Infinity), config forms -------------------------------------------------
txt = open(os.path.join(d1, "config.json")).read()
ck("[config] the reference's config.json carries Python's bare Infinity", "Infinity" in txt, "")
for tag, mdir in (("hybrid", d1), ("tied-bias-limit", d2)):
    rt = os.path.join(w, "rt_" + tag)
    if engine(["train", "--model", mdir, "--data", data, "--steps", 0, "--micro-batch", B, "--seq-len", T,
               "--save", rt], f"rt_{tag}.log"):
        a = common.st_read(os.path.join(mdir, "model.safetensors"), to_f32=False)
        b = common.st_read(os.path.join(rt, "model.safetensors"), to_f32=False)
        same = set(a) == set(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
        ck(f"[round trip] [{tag}] --steps 0 --save: the same tensor names, byte-identical", same,
           f"{len(a)} tensors" if same else f"names differ: {sorted(set(a) ^ set(b))}" if set(a) != set(b)
           else f"differ: {[k for k in a if a[k].tobytes() != b[k].tobytes()]}")
        try:
            c0, c1r = N.NemotronHConfig(common.config_read(mdir)), N.NemotronHConfig(common.config_read(rt))
            raw = common.config_read(rt)
            ck(f"[round trip] [{tag}] saved config.json reads back the same (NemotronHForCausalLM, the pattern, "
               f"Infinity included)", c0.to_dict() == c1r.to_dict() and raw.get("model_type") == "nemotron_h"
               and raw.get("architectures") == ["NemotronHForCausalLM"],
               "" if c0.to_dict() == c1r.to_dict() else
               str({k: (v, c1r.to_dict()[k]) for k, v in c0.to_dict().items() if c1r.to_dict()[k] != v}))
        except Exception as ex:  # noqa: BLE001
            ck(f"[round trip] [{tag}] saved config.json", False, str(ex))
for what, edit in (("no 'architectures': the family from model_type 'nemotron_h'", "arch"),
                   ("attention_head_dim (Nemotron-H-8B's name) instead of head_dim", "ahd")):
    mt = os.path.join(w, "model_cfg_" + edit)
    os.makedirs(mt, exist_ok=True)
    d = c1.to_dict()
    if edit == "arch":
        del d["architectures"]
    else:
        d["attention_head_dim"] = d.pop("head_dim")
    with open(os.path.join(mt, "config.json"), "w") as f:
        json.dump(d, f)
    os.link(os.path.join(d1, "model.safetensors"), os.path.join(mt, "model.safetensors"))
    out = os.path.join(w, f"dump_cfg_{edit}.safetensors")
    if engine(EC.dump_args(mt, data, out, "none"), f"dump_cfg_{edit}.log") and dumps1.get("none"):
        eq, det = EC.tensors_bit_equal(out, dumps1["none"])
        ck(f"[config] {what} (dump bit-identical)", eq, det)

# ---- 4. packed documents: --doc-attention-mask restarts conv and scan and masks attention at each document --
DOC_STARTS = np.cumsum([0, 37, 5, 120, 1, 64, 200, 88, 150])[:-1]  # EC.make_data's documents


def docs_dump(m, stream, reset=True):
    """The engine's dump with document masking, by running each document piece of a row on its own
    (attention sees only its document, the recurrent mixers restart); reset False: the whole row
    (the negative control)."""
    m.zero_grad(set_to_none=True)
    x, y = N.L.batch(stream, 0, B, T)
    rows = []
    for r in range(B):
        cut = [0] + [int(d - r * T) for d in DOC_STARTS if reset and 0 < d - r * T < T] + [T]
        rows.append(torch.cat([m(x[r:r + 1, a:b]) for a, b in zip(cut, cut[1:])], dim=1))
    logits = torch.cat(rows, 0)
    loss = N.loss_fn(logits, y)
    loss.backward()
    out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(), "loss": np.array([loss.item()], np.float32)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().copy()
    return out


for tag, mdir in (("hybrid", d1), ("tied-bias-limit", d2)):
    mm = N.load_hf(mdir)
    ref, ref_cont = docs_dump(mm, stream), docs_dump(mm, stream, reset=False)
    out = os.path.join(w, f"dump_docs_{tag}.safetensors")
    if engine(EC.dump_args(mdir, data, out, "none") + ["--doc-attention-mask", "true"], f"dump_docs_{tag}.log"):
        compare_dump(f"[{tag}] --doc-attention-mask: a packed row = its documents run separately (logits, loss, "
                     f"all grads, {EC.DUMP_TOL:g} rel)", out, ref, mm)
        e = common.st_read(out)
        err = EC.rel_err(e["logits"].reshape(ref_cont["logits"].shape), ref_cont["logits"])
        ck(f"[{tag}] negative control: the row run without resets differs from the engine's",
           err > 100 * EC.DUMP_TOL, f"logits rel {err:.2e}")
        for mode in ("selective", "full"):
            o2 = os.path.join(w, f"dump_docs_{tag}_{mode}.safetensors")
            if engine(EC.dump_args(mdir, data, o2, mode) + ["--doc-attention-mask", "true"], f"docs_{tag}_{mode}.log"):
                eq, det = EC.tensors_bit_equal(out, o2)
                ck(f"[{tag}] --doc-attention-mask dump bit-identical none vs {mode}", eq, det)

print(f"{ck.passed} passed, {ck.failed} failed")
sys.exit(1 if ck.failed else 0)
