"""tests/ref/mistral_checks.py — the checks of tests/ref/test_torch_mistral.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR."""
import argparse
import os
import sys

import numpy as np
import torch

import common  # noqa: E402
import engine_checks as EC  # noqa: E402
import llama_ref as L  # noqa: E402

_ap = argparse.ArgumentParser()
_ap.add_argument("--shardlm", required=True)
_ap.add_argument("--work", required=True)
_args = _ap.parse_args()
exe, w = os.path.abspath(_args.shardlm), os.path.abspath(_args.work)
torch.set_num_threads(2)
ck = EC.Checker()
data = os.path.join(w, "data")
stream = EC.make_data(data)
B, T, STEPS, HP, CKPT = EC.B, EC.T, EC.STEPS, EC.HP, EC.CKPT
WINDOW = 5
assert WINDOW < T


def engine(args, log):
    ok, msg = EC.run_engine(exe, args, os.path.join(w, log))
    if not ok:
        ck(f"shardlm {args[0]} ({log})", False, msg)
    return ok


def engine_losses(path):
    return [r["loss"] for r in common.read_metrics(path) if "step" in r]


def st_bytes_equal(pa, pb):
    a, b = common.st_read(pa, to_f32=False), common.st_read(pb, to_f32=False)
    if set(a) != set(b):
        return False, f"names differ: {sorted(set(a) ^ set(b))}"
    diff = [k for k in sorted(a) if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
            or a[k].tobytes() != b[k].tobytes()]
    return not diff, (f"{len(diff)} tensors differ, e.g. {diff[0]}" if diff
                      else f"{len(a)} tensors byte-identical")


for tied in (False, True):
    tag = "tied" if tied else "untied"
    cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=160, vocab=EC.VOCAB,
                        tied=tied, mistral=True, sliding_window=WINDOW)
    mdir = os.path.join(w, "model_" + tag)
    L.save_hf(L.init_model(cfg, seed=17 + tied, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    assert ref_m.config.sliding_window == WINDOW
    names = [n for n, _ in ref_m.named_parameters()]

    # ---- dump vs PyTorch, window sensitivity, checkpoint modes
    ref = L.dump(ref_m, stream, B, T)
    ref64 = L.dump(L.load_hf(mdir, torch.float64), stream, B, T)
    noise = max(EC.rel_err(ref[k], ref64[k]) for k in ref)
    dumps = {}
    for mode in CKPT:
        out = os.path.join(w, f"dump_{tag}_{mode}.safetensors")
        dumps[mode] = out if engine(EC.dump_args(mdir, data, out, mode), out + ".log") else None
    if dumps["none"]:
        EC.compare_dump(ck, f"[{tag}] dump vs PyTorch, window {WINDOW} < seq-len {T}, GQA 4/2: "
                        f"logits, loss, all grads (2e-5 rel; torch fp32 vs fp64 {noise:.1e})",
                        dumps["none"], ref, names)
        if not tied:
            logits = common.st_read(dumps["none"])["logits"]
            errs = {}
            for wv in (0, WINDOW - 1, WINDOW + 1):
                ref_m.config.sliding_window = wv
                errs[wv] = EC.rel_err(logits, L.dump(ref_m, stream, B, T)["logits"])
            ref_m.config.sliding_window = WINDOW
            ck(f"[{tag}] window applied exactly: logits differ from no window / {WINDOW - 1} / "
               f"{WINDOW + 1} (> 1e-3 rel)", all(e > 1e-3 for e in errs.values()),
               ", ".join(f"window {k or 'none'}: rel {v:.2e}" for k, v in errs.items()))
    for mode in CKPT[1:]:
        if dumps["none"] and dumps[mode]:
            eq, d = EC.tensors_bit_equal(dumps["none"], dumps[mode])
            ck(f"[{tag}] dump bit-identical none vs {mode}", eq, d)

    # ---- 10 AdamW steps
    ref_m = L.load_hf(mdir)
    rows = L.train(ref_m, stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"],
                   HP["wd"], HP["b1"], HP["b2"], HP["eps"], HP["clip"])
    nclip = sum(r["grad_norm"] > HP["clip"] for r in rows)
    ck(f"[{tag}] reference clipping active", nclip >= 1, f"{nclip}/{STEPS} steps")
    modes = CKPT if not tied else ("none",)
    runs = {}
    for mode in modes:
        met = os.path.join(w, f"metrics_{tag}_{mode}.jsonl")
        save = os.path.join(w, f"saved_{tag}_{mode}")
        if engine(EC.train_args(mdir, data, met, save, mode), met + ".log"):
            runs[mode] = (met, save)
    if "none" in runs:
        EC.compare_training(ck, f"[{tag}] train", runs["none"][0], runs["none"][1], rows, ref_m)
    for mode in modes[1:]:
        if "none" in runs and mode in runs:
            l0, l1 = engine_losses(runs["none"][0]), engine_losses(runs[mode][0])
            ck(f"[{tag}] train losses bit-identical none vs {mode}",
               len(l0) == STEPS and [repr(x) for x in l0] == [repr(x) for x in l1],
               "" if l0 == l1 else f"none {l0} vs {mode} {l1}")
            eq, d = EC.tensors_bit_equal(os.path.join(runs["none"][1], "model.safetensors"),
                                         os.path.join(runs[mode][1], "model.safetensors"))
            ck(f"[{tag}] saved weights bit-identical none vs {mode}", eq, d)

    # ---- HF round trip
    rt = os.path.join(w, "rt_" + tag)
    if engine(["train", "--model", mdir, "--data", data, "--steps", 0, "--micro-batch", B,
               "--seq-len", T, "--save", rt], f"rt_{tag}.log"):
        ok, d = st_bytes_equal(os.path.join(mdir, "model.safetensors"),
                               os.path.join(rt, "model.safetensors"))
        ck(f"[{tag}] round trip --steps 0 --save: tensors byte-identical", ok, d)
        c1 = common.config_read(rt)
        ok = (c1.get("architectures") == ["MistralForCausalLM"] and c1.get("model_type") == "mistral"
              and c1.get("sliding_window") == WINDOW
              and L.LlamaConfig(c1).to_dict() == cfg.to_dict())
        ck(f"[{tag}] round trip config.json: MistralForCausalLM, sliding_window {WINDOW}", ok,
           "" if ok else f"{c1}")
    cdir, hdir = os.path.join(w, "ckpt_" + tag), os.path.join(w, "hf2_" + tag)
    if (engine(["convert", "--from-hf", mdir, "--to-ckpt", cdir, "--world-size", 3, "--zero", 3],
               f"cv1_{tag}.log") and
            engine(["convert", "--from-ckpt", cdir, "--model-config", mdir, "--to-hf", hdir],
                   f"cv2_{tag}.log")):
        ok, d = st_bytes_equal(os.path.join(mdir, "model.safetensors"),
                               os.path.join(hdir, "model.safetensors"))
        ck(f"[{tag}] convert HF -> ckpt (3 ranks, ZeRO-3) -> HF: tensors byte-identical", ok, d)

print(f"{ck.passed} passed, {ck.failed} failed")
sys.exit(1 if ck.failed else 0)
