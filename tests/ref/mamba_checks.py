"""tests/ref/mamba_checks.py — the checks of tests/ref/test_torch_mamba.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR."""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

import common  # noqa: E402
import engine_checks as EC  # noqa: E402
import mamba_ref as M  # noqa: E402

# EC.compare_training reloads the --save dir with EC.L.load_hf: point it at
# the Mamba oracle (the rest of EC is architecture-free).
EC.L = M
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
CKPT = EC.CKPT


def engine(args, log):
    ok, msg = EC.run_engine(exe, args, os.path.join(w, log))
    if not ok:
        ck(f"shardlm {args[0]} ({log})", False, msg)
    return ok


def ref_train(mdir):
    m = M.load_hf(mdir)
    rows = M.train(m, stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"],
                   HP["wd"], HP["b1"], HP["b2"], HP["eps"], HP["clip"])
    return m, rows


def engine_losses(path):
    return [r["loss"] for r in common.read_metrics(path) if "step" in r]


def st_bytes_equal(pa, pb, rename=None):
    """(ok, detail): tensor data bytes of two safetensors files by name."""
    a, b = common.st_read(pa, to_f32=False), common.st_read(pb, to_f32=False)
    if rename:
        a = {rename.get(k, k): v for k, v in a.items()}
    if set(a) != set(b):
        return False, f"names differ: {sorted(set(a) ^ set(b))}"
    diff = [k for k in sorted(a) if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
            or a[k].tobytes() != b[k].tobytes()]
    return not diff, (f"{len(diff)} tensors differ, e.g. {diff[0]}" if diff
                      else f"{len(a)} tensors byte-identical")


def full_suite(tag, cfg, modes, seed):
    mdir = os.path.join(w, "model_" + tag)
    M.save_hf(M.init_model(cfg, seed=seed, std=0.1, jitter=0.2), mdir)
    ref_m = M.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ref = M.dump(ref_m, stream, B, T)
    ref64 = M.dump(M.load_hf(mdir, torch.float64), stream, B, T)
    noise = max(EC.rel_err(ref[k], ref64[k]) for k in ref)
    dumps = {}
    for mode in CKPT:
        out = os.path.join(w, f"dump_{tag}_{mode}.safetensors")
        dumps[mode] = out if engine(EC.dump_args(mdir, data, out, mode), out + ".log") else None
    if dumps["none"]:
        EC.compare_dump(ck, f"[{tag}] dump vs PyTorch: logits, loss, all grads (2e-5 rel; torch "
                        f"fp32 vs fp64 {noise:.1e})", dumps["none"], ref, names)
    for mode in CKPT[1:]:
        if dumps["none"] and dumps[mode]:
            eq, d = EC.tensors_bit_equal(dumps["none"], dumps[mode])
            ck(f"[{tag}] dump bit-identical none vs {mode}", eq, d)
    ref_m, rows = ref_train(mdir)
    nclip = sum(r["grad_norm"] > HP["clip"] for r in rows)
    ck(f"[{tag}] reference clipping active", nclip >= 1, f"{nclip}/{STEPS} steps")
    runs = {}
    for mode in modes:
        met = os.path.join(w, f"metrics_{tag}_{mode}.jsonl")
        save = os.path.join(w, f"saved_{tag}_{mode}")
        if engine(EC.train_args(mdir, data, met, save, mode), met + ".log"):
            runs[mode] = (met, save)
    if "none" in runs:
        EC.compare_training(ck, f"[{tag}] train", runs["none"][0], runs["none"][1], rows, ref_m)
    # the same training on 2 ranks under tensor + sequence parallelism (Mamba TP)
    met, save = os.path.join(w, f"metrics_{tag}_tp2sp.jsonl"), os.path.join(w, f"saved_{tag}_tp2sp")
    ok, msg = EC.run_engine("mpirun", ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2", exe]
                            + EC.train_args(mdir, data, met, save, "none") + ["--tp", 2, "--sequence-parallel"],
                            met + ".log")
    if ok:
        EC.compare_training(ck, f"[{tag}] train --tp 2 --sequence-parallel", met, save, rows, ref_m)
    else:
        ck(f"[{tag}] train --tp 2 --sequence-parallel", False, msg)
    for mode in modes[1:]:
        if "none" in runs and mode in runs:
            l0, l1 = engine_losses(runs["none"][0]), engine_losses(runs[mode][0])
            ck(f"[{tag}] train losses bit-identical none vs {mode}",
               len(l0) == STEPS and [repr(x) for x in l0] == [repr(x) for x in l1],
               "" if l0 == l1 else f"none {l0} vs {mode} {l1}")
            eq, d = EC.tensors_bit_equal(os.path.join(runs["none"][1], "model.safetensors"),
                                         os.path.join(runs[mode][1], "model.safetensors"))
            ck(f"[{tag}] saved weights bit-identical none vs {mode}", eq, d)
    return mdir


# ---- 1. HF format: tied (default) and untied with biases -------------------
tied_dir = full_suite("hf-tied", M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4,
                                               dt_rank=3, vocab=EC.VOCAB), CKPT, seed=7)
cb = M.make_config(hidden=32, layers=2, state=8, expand=2, conv=3, dt_rank=4, vocab=EC.VOCAB,
                   tied=False)
cb.use_bias, cb.use_conv_bias = True, False
bias_dir = full_suite("hf-untied-bias", cb, ("none",), seed=8)
with torch.no_grad():  # the untied model's zero-initialised biases: give them values
    mb = M.load_hf(bias_dir)
    g = torch.Generator().manual_seed(3)
    for n, p in mb.named_parameters():
        if n.endswith("proj.bias") and "dt_proj" not in n:
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    M.save_hf(mb, bias_dir)
out = os.path.join(w, "dump_bias2.safetensors")
if engine(EC.dump_args(bias_dir, data, out, "none"), out + ".log"):
    EC.compare_dump(ck, "[hf-untied-bias] dump with non-zero in/out_proj biases (2e-5 rel)", out,
                    M.dump(mb, stream, B, T), [n for n, _ in mb.named_parameters()])

# ---- 2. state-spaces checkpoint ---------------------------------------------
ss_cfg = {"d_model": 32, "n_layer": 2, "vocab_size": EC.VOCAB, "pad_vocab_size_multiple": 8,
          "tie_embeddings": True, "rms_norm": True, "residual_in_fp32": True,
          "ssm_cfg": {"d_state": 8, "d_conv": 4, "expand": 2, "dt_rank": 3}}
VP = (EC.VOCAB + 7) // 8 * 8
ref_ss = M.init_model(M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4, dt_rank=3,
                                    vocab=VP), seed=9, std=0.1, jitter=0.2)
ss_dir = os.path.join(w, "model_ss")
os.makedirs(ss_dir, exist_ok=True)
with open(os.path.join(ss_dir, "config.json"), "w") as f:
    json.dump(ss_cfg, f)
to_ss = {"backbone.embeddings.weight": "backbone.embedding.weight"}
sd = {to_ss.get(n, n): a for n, a in M.state_numpy(ref_ss).items()}
sd["lm_head.weight"] = sd["backbone.embedding.weight"].copy()  # mamba_ssm stores the tied copy
common.st_write(os.path.join(ss_dir, "model.safetensors"), sd)
ref = M.dump(ref_ss, stream, B, T)
ref = {("grad.backbone.embedding.weight" if k == "grad.backbone.embeddings.weight" else k): v
       for k, v in ref.items()}
out = os.path.join(w, "dump_ss.safetensors")
if engine(EC.dump_args(ss_dir, data, out, "none"), out + ".log"):
    e = common.st_read(out)
    ck(f"[state-spaces] vocab {EC.VOCAB} padded to {VP} (logits width)", e["logits"].shape[-1] == VP,
       f"logits {list(e['logits'].shape)}")
    EC.compare_dump(ck, "[state-spaces] dump vs PyTorch (backbone.embedding.weight, 2e-5 rel)", out,
                    ref, [n[5:] for n in ref if n.startswith("grad.")])
met = os.path.join(w, "metrics_ss.jsonl")
if engine(EC.train_args(ss_dir, data, met, os.path.join(w, "saved_ss"), "none"), met + ".log"):
    rows = M.train(ref_ss, stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"],
                   HP["wd"], HP["b1"], HP["b2"], HP["eps"], HP["clip"])
    el = engine_losses(met)
    dl = [abs(a - b["loss"]) for a, b in zip(el, rows)]
    ck("[state-spaces] train per-step loss (1e-4 abs)", len(el) == STEPS and max(dl) <= EC.LOSS_TOL,
       f"max|dloss| {max(dl):.2e}; engine " + " ".join(f"{x:.5f}" for x in el))

# ---- 3. HF round trip: --steps 0 --save, convert HF -> ckpt -> HF -------------
for tag, mdir in (("hf-tied", tied_dir), ("hf-untied-bias", bias_dir)):
    rt = os.path.join(w, "rt_" + tag)
    if engine(["train", "--model", mdir, "--data", data, "--steps", 0, "--micro-batch", B,
               "--seq-len", T, "--save", rt], f"rt_{tag}.log"):
        ok, d = st_bytes_equal(os.path.join(mdir, "model.safetensors"),
                               os.path.join(rt, "model.safetensors"))
        ck(f"[{tag}] round trip --steps 0 --save: tensors byte-identical", ok, d)
        try:
            c0, c1 = M.MambaConfig(common.config_read(mdir)), M.MambaConfig(common.config_read(rt))
            ck(f"[{tag}] round trip config.json equal (MambaConfig fields)",
               c0.to_dict() == c1.to_dict(), "" if c0.to_dict() == c1.to_dict()
               else f"{c0.to_dict()} vs {c1.to_dict()}")
        except Exception as ex:  # noqa: BLE001
            ck(f"[{tag}] round trip config.json", False, str(ex))
    cdir, hdir = os.path.join(w, "ckpt_" + tag), os.path.join(w, "hf2_" + tag)
    if (engine(["convert", "--from-hf", mdir, "--to-ckpt", cdir, "--world-size", 2, "--zero", 3],
               f"cv1_{tag}.log") and
            engine(["convert", "--from-ckpt", cdir, "--model-config", mdir, "--to-hf", hdir],
                   f"cv2_{tag}.log")):
        ok, d = st_bytes_equal(os.path.join(mdir, "model.safetensors"),
                               os.path.join(hdir, "model.safetensors"))
        ck(f"[{tag}] convert HF -> ckpt (2 ranks, ZeRO-3) -> HF: tensors byte-identical", ok, d)

# ---- 4. init from seed ------------------------------------------------------
ci = M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4, dt_rank=3, vocab=EC.VOCAB,
                   tied=False)
idir = os.path.join(w, "model_init")
common.config_write(idir, ci.to_dict())
saved = {}
for tag, seed in (("a", 11), ("b", 11), ("c", 12)):
    sdir = os.path.join(w, "init_" + tag)
    if engine(["train", "--model", idir, "--init", "random", "--data", data, "--steps", 0, "--micro-batch", B,
               "--seq-len", T, "--seed", seed, "--save", sdir], f"init_{tag}.log"):
        saved[tag] = sdir
if {"a", "b", "c"} <= set(saved):
    pa = os.path.join(saved["a"], "model.safetensors")
    ok, d = st_bytes_equal(pa, os.path.join(saved["b"], "model.safetensors"))
    ck("[init] same seed: byte-identical weights", ok, d)
    ta, tc = common.st_read(pa), common.st_read(os.path.join(saved["c"], "model.safetensors"))
    rnd = [k for k in ta if not (k.endswith("A_log") or k.endswith(".D") or "norm" in k)]
    same = [k for k in rnd if np.array_equal(ta[k], tc[k])]
    ck("[init] another seed: every random tensor differs", not same, f"equal: {same}" if same else
       f"{len(rnd)} random tensors")
    S, D, R, H, K = ci.state_size, ci.intermediate_size, ci.time_step_rank, ci.hidden_size, ci.conv_kernel
    bad = []
    for k, a in ta.items():
        a = a.astype(np.float64)
        if k.endswith("A_log"):
            if not np.allclose(a, np.log(np.arange(1, S + 1))[None].repeat(D, 0), rtol=0, atol=1e-6):
                bad.append(k)
        elif k.endswith(".D") or "norm" in k:
            if not np.all(a == 1.0):
                bad.append(k)
        elif k.endswith("dt_proj.bias"):
            dt = np.log1p(np.exp(a))  # softplus
            if not (dt.min() >= 1e-3 * 0.999 and dt.max() <= 0.1 * 1.001 and dt.std() > 0.005):
                bad.append(f"{k} softplus range [{dt.min():.2e}, {dt.max():.2e}]")
        else:
            if k.endswith("dt_proj.weight"):
                bound = R ** -0.5
            elif "conv1d" in k:
                bound = 1 / math.sqrt(K)
            elif k == "backbone.embeddings.weight":
                bound = None
                if abs(a.std() - 0.1) > 0.01 or abs(a.mean()) > 0.01:  # HF initializer_range 0.1
                    bad.append(f"{k} std {a.std():.3f}")
            else:
                bound = 1 / math.sqrt(a.shape[1])  # nn.Linear default: +-1/sqrt(fan_in)
            if bound is not None and not (np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound
                                          and abs(a.std() - bound / math.sqrt(3)) < 0.15 * bound):
                bad.append(f"{k} max {np.abs(a).max():.3f} std {a.std():.3f} vs bound {bound:.3f}")
    ck("[init] HF Mamba init rules (A_log, D, dt_proj, uniform fan-in bounds, embedding std)",
       not bad, f"bad: {bad}" if bad else f"{len(ta)} tensors")
    out = os.path.join(w, "dump_init.safetensors")
    if engine(EC.dump_args(idir, data, out, "none") + ["--seed", 11, "--init", "random"], "dump_init.log"):
        mi = M.load_hf(saved["a"])
        EC.compare_dump(ck, "[init] dump of the seed-initialised model vs PyTorch on its saved weights",
                        out, M.dump(mi, stream, B, T), [n for n, _ in mi.named_parameters()])

print(f"{ck.passed} passed, {ck.failed} failed")
sys.exit(1 if ck.failed else 0)
