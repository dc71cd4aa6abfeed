"""Drives `shardlm dump` / `shardlm train` and compares them with the PyTorch oracle.

Usage: engine_checks.py --shardlm PATH --work DIR [--no-selftest]
Checks (one line each, then "N passed, M failed"):
  1. dump vs PyTorch (tiny GQA Llama, untied and tied): logits, loss, every
     parameter gradient to 2e-5 relative (max|a-b| / max|b| per tensor);
  2. 10 AdamW steps (grad_accum 2, warmup 3, cosine, wd 0.1, active clipping):
     per-step loss 1e-4 abs, lr, grad_norm, final saved weights 1e-4 abs;
  3. activation checkpointing none/selective/full: dumps, step losses and the
     saved weights bit-identical;
  4. the --save dir loads in PyTorch and, used as --model, dumps logits equal
     to PyTorch's logits of the saved weights.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402

VOCAB, T, B = 97, 16, 3
ACCUM, STEPS = 2, 10
HP = dict(lr=3e-3, min_lr=3e-4, warmup=3, wd=0.1, b1=0.9, b2=0.95, eps=1e-6, clip=1.0)
# each bound >= 10x the worst measured over OpenBLAS core types and thread
# counts (docs/CONTRIBUTING.md, "Tolerances"): dump 1.22e-6 (max rel),
# losses and weights 7.95e-6 abs, grad norm 8.9e-7 rel, lr 1.7e-9 rel
DUMP_TOL, LOSS_TOL, W_TOL, GN_TOL, LR_TOL = 2e-5, 1e-4, 1e-4, 1e-4, 1e-6
CKPT = ("none", "selective", "full")


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        return ok


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if b.size else 0.0


def run_engine(exe, args, log_path, timeout=300, env=None):
    """Run the CLI (env: variables added to the environment); return (ok, message)."""
    cmd = [exe] + [str(a) for a in args]
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        try:
            # cwd: the engine writes run artefacts (runs/latest/...) relative to it
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                               cwd=os.path.dirname(os.path.abspath(log_path)),
                               env=dict(os.environ, **env) if env else None)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout}s: {' '.join(cmd)}"
        except OSError as e:
            return False, f"cannot run {cmd[0]}: {e}"
    if r.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-1500:]
        return False, f"exit {r.returncode}: {' '.join(cmd)}\n---- output tail ----\n{tail}\n----"
    return True, f"{time.time() - t0:.1f}s"


def start():
    """The command line of a check driver (--shardlm EXE --work DIR): returns
    (a Checker, the absolute EXE, the work dir made, its data prefix)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    w = os.path.abspath(a.work)
    os.makedirs(w, exist_ok=True)
    return Checker(), os.path.abspath(a.shardlm), w, os.path.join(w, "data")


def make_data(prefix):
    """Documents of different lengths; 665 tokens in all, less than the 961 the
    10 training steps read, so the sequential order wraps around in step 7."""
    rng = np.random.RandomState(1234)
    lengths = [37, 5, 120, 1, 64, 200, 88, 150]
    docs = [rng.randint(0, VOCAB, n) for n in lengths]
    common.idx_write(prefix, docs, dtype=np.uint16)
    return common.token_stream(prefix)


def compare_dump(ck, label, eng_path, ref, names):
    """Compare an engine dump file with the reference dict; one check line."""
    try:
        eng = common.st_read(eng_path)
    except Exception as e:  # noqa: BLE001
        return ck(label, False, f"cannot read {eng_path}: {e}")
    want = {"logits", "loss"} | {"grad." + n for n in names}
    missing = sorted(want - set(eng))
    extra = sorted(set(eng) - want)
    if missing:
        return ck(label, False, f"missing tensors {missing}")
    errs = {k: rel_err(eng[k].reshape(ref[k].shape) if eng[k].size == ref[k].size else eng[k], ref[k])
            for k in sorted(want)}
    bad = {k: v for k, v in errs.items() if not v <= DUMP_TOL}
    worst = max(errs, key=lambda k: errs[k])
    detail = f"{len(errs)} tensors, worst {worst} rel {errs[worst]:.2e}"
    if extra:
        detail += f" (extra tensors ignored: {extra})"
    if bad:
        detail += f"; over {DUMP_TOL:g}: " + ", ".join(f"{k} {v:.2e} shape {list(eng[k].shape)}"
                                              for k, v in sorted(bad.items(), key=lambda x: -x[1]))
    return ck(label, not bad, detail)


def tensors_bit_equal(p1, p2):
    """(equal, detail) comparing every tensor's bytes of two safetensors files."""
    try:
        a, b = common.st_read(p1, to_f32=False), common.st_read(p2, to_f32=False)
    except Exception as e:  # noqa: BLE001
        return False, f"cannot read: {e}"
    if set(a) != set(b):
        return False, f"tensor names differ: {sorted(set(a) ^ set(b))}"
    diff = [k for k in sorted(a) if a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]
    if diff:
        k = diff[0]
        d = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max() if a[k].shape == b[k].shape else -1
        return False, f"{len(diff)} tensors differ, e.g. {k} max|diff| {d:.3e}"
    return True, f"{len(a)} tensors bit-identical"


def train_args(model, data, metrics, save, ckpt):
    return ["train", "--model", model, "--data", data, "--data-order", "sequential",
            "--steps", STEPS, "--micro-batch", B, "--seq-len", T, "--grad-accum", ACCUM,
            "--lr", HP["lr"], "--min-lr", HP["min_lr"], "--warmup", HP["warmup"],
            "--weight-decay", HP["wd"], "--beta1", HP["b1"], "--beta2", HP["b2"],
            "--eps", HP["eps"], "--clip", HP["clip"], "--metrics", metrics, "--save", save,
            "--activation-checkpoint", ckpt]


def dump_args(model, data, out, ckpt):
    return ["dump", "--model", model, "--data", data, "--data-order", "sequential",
            "--micro-batch", B, "--seq-len", T,
            "--out", out, "--activation-checkpoint", ckpt]


def dump_modes(ck, exe, w, mdir, data, ref, names, label, tag=""):
    """Dump under every checkpointing mode: the none dump against ref (one
    check line, label), the others bit-identical to it. Returns the dumps."""
    dumps, pre, fp = {}, f"[{tag}] " if tag else "", f"{tag}_" if tag else ""
    for mode in CKPT:
        out = os.path.join(w, f"dump_{fp}{mode}.safetensors")
        ok, msg = run_engine(exe, dump_args(mdir, data, out, mode), out + ".log")
        dumps[mode] = out if ok else None
        if not ok:
            ck(f"{pre}dump --activation-checkpoint {mode}", False, msg)
    if dumps["none"]:
        compare_dump(ck, label, dumps["none"], ref, names)
    for mode in CKPT[1:]:
        if dumps["none"] and dumps[mode]:
            eq, d = tensors_bit_equal(dumps["none"], dumps[mode])
            ck(f"{pre}dump bit-identical none vs {mode}", eq, d)
    return dumps


def train_vs_ref(ck, exe, w, mdir, data, stream, oracle):
    """10 AdamW steps of the engine against oracle.train on mdir's weights
    (compare_training's checks). Returns the engine's saved dir, or None."""
    ref_m = oracle.load_hf(mdir)
    ref_rows = oracle.train(ref_m, stream, STEPS, B, T, ACCUM, HP["lr"], HP["min_lr"], HP["warmup"], HP["wd"],
                            HP["b1"], HP["b2"], HP["eps"], HP["clip"])
    met, save = os.path.join(w, "metrics.jsonl"), os.path.join(w, "saved")
    ok, msg = run_engine(exe, train_args(mdir, data, met, save, "none"), met + ".log")
    if not ok:
        ck("train", False, msg)
        return None
    compare_training(ck, "[train]", met, save, ref_rows, ref_m)
    return save


def compare_training(ck, label, metrics_path, save_dir, ref_rows, ref_model):
    try:
        rows = [r for r in common.read_metrics(metrics_path) if "step" in r]
    except Exception as e:  # noqa: BLE001
        ck(label + " metrics", False, f"cannot read {metrics_path}: {e}")
        return
    steps = [r["step"] for r in rows]
    if steps != list(range(1, STEPS + 1)):
        ck(label + " metrics", False, f"steps {steps}, expected 1..{STEPS}")
        return
    dl = [abs(e["loss"] - r["loss"]) for e, r in zip(rows, ref_rows)]
    first_bad = next((i + 1 for i, d in enumerate(dl) if not d <= LOSS_TOL), None)
    detail = f"max|dloss| {max(dl):.2e} at step {int(np.argmax(dl)) + 1}"
    if first_bad:
        detail += (f"; first step over 1e-4: {first_bad} (engine {rows[first_bad - 1]['loss']:.6f}"
                   f" ref {ref_rows[first_bad - 1]['loss']:.6f}); engine "
                   + " ".join(f"{r['loss']:.5f}" for r in rows) + " | ref "
                   + " ".join(f"{r['loss']:.5f}" for r in ref_rows))
    ck(label + " per-step loss (1e-4 abs)", first_bad is None, detail)
    dlr = [abs(e.get("lr", float("nan")) - r["lr"]) / r["lr"] for e, r in zip(rows, ref_rows)]
    ck(label + " per-step lr (1e-6 rel)", all(d <= LR_TOL for d in dlr),
       f"max rel {max(dlr):.2e}; engine " + " ".join(f"{e.get('lr', float('nan')):.6g}" for e in rows))
    dgn = [abs(e.get("grad_norm", float("nan")) - r["grad_norm"]) / r["grad_norm"]
           for e, r in zip(rows, ref_rows)]
    ck(label + " per-step grad_norm (1e-4 rel)", all(d <= GN_TOL for d in dgn),
       f"max rel {max(dgn):.2e}; engine " + " ".join(f"{e.get('grad_norm', float('nan')):.5f}" for e in rows)
       + " | ref " + " ".join(f"{r['grad_norm']:.5f}" for r in ref_rows))
    try:
        saved = L.load_hf(save_dir)
    except Exception as e:  # noqa: BLE001
        ck(label + " final weights (1e-4 abs)", False, f"saved dir does not load: {e}")
        return
    errs = {n: (p.detach() - q.detach()).abs().max().item()
            for (n, p), q in zip(saved.named_parameters(), ref_model.parameters())}
    worst = max(errs, key=lambda k: errs[k])
    bad = {k: v for k, v in errs.items() if not v <= W_TOL}
    ck(label + " final weights (1e-4 abs)", not bad,
       f"worst {worst} {errs[worst]:.2e}" + (f"; over: {sorted(bad)}" if bad else ""))


def train_check(ck, exe, w, mdir, data, stream, arch, model_type):
    """train_vs_ref against llama_ref, then the saved config's architecture.
    Returns the saved config (None when the run failed)."""
    save = train_vs_ref(ck, exe, w, mdir, data, stream, L)
    if not save:
        return None
    c = common.config_read(save)
    ck(f"saved config is {arch}", c.get("architectures") == [arch] and c.get("model_type") == model_type,
       str(c.get("architectures")))
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-selftest", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    ck = Checker()
    if not a.no_selftest:
        import selftest
        nf = selftest.run()
        ck("reference self-tests (gradcheck, naive attention, formats, data order)", nf == 0,
           f"{nf} failed" if nf else "")
    exe, w = os.path.abspath(a.shardlm), os.path.abspath(a.work)
    os.makedirs(w, exist_ok=True)
    data = os.path.join(w, "data")
    stream = make_data(data)

    for tied in (False, True):
        tag = "tied" if tied else "untied"
        cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=160, vocab=VOCAB,
                            tied=tied)
        mdir = os.path.join(w, "model_" + tag)
        L.save_hf(L.init_model(cfg, seed=7 + tied, std=0.08, norm_jitter=0.1), mdir)
        ref_m = L.load_hf(mdir)
        names = [n for n, _ in ref_m.named_parameters()]

        # ---- 1. dump vs PyTorch (+ the reference's own fp32-vs-fp64 noise floor)
        ref = L.dump(ref_m, stream, B, T)
        ref64 = L.dump(L.load_hf(mdir, torch.float64), stream, B, T)
        noise = max(rel_err(ref[k], ref64[k]) for k in ref)
        dump_modes(ck, exe, w, mdir, data, ref, names, f"[{tag}] dump vs PyTorch: logits, loss, all grads "
                   f"(2e-5 rel; torch fp32 vs fp64 {noise:.1e})", tag)  # 3a: modes bit-identical

        # ---- 2. 10 AdamW steps
        ref_m = L.load_hf(mdir)
        ref_rows = L.train(ref_m, stream, STEPS, B, T, ACCUM, HP["lr"], HP["min_lr"], HP["warmup"],
                           HP["wd"], HP["b1"], HP["b2"], HP["eps"], HP["clip"])
        nclip = sum(r["grad_norm"] > HP["clip"] for r in ref_rows)
        ck(f"[{tag}] reference clipping active (grad_norm > clip {HP['clip']})", nclip >= 1,
           f"{nclip}/{STEPS} steps; ref losses " + " ".join(f"{r['loss']:.4f}" for r in ref_rows))
        modes = CKPT if not tied else ("none",)
        runs = {}
        for mode in modes:
            met = os.path.join(w, f"metrics_{tag}_{mode}.jsonl")
            save = os.path.join(w, f"saved_{tag}_{mode}")
            ok, msg = run_engine(exe, train_args(mdir, data, met, save, mode), met + ".log")
            if not ok:
                ck(f"[{tag}] train --activation-checkpoint {mode}", False, msg)
                continue
            runs[mode] = (met, save)
        if "none" in runs:
            compare_training(ck, f"[{tag}] train", runs["none"][0], runs["none"][1], ref_rows, ref_m)
        # ---- 2b. the same training on 2 ranks under tensor + sequence parallelism
        # (vocabulary-parallel head: VOCAB is odd, so padded), under a pipeline, and
        # under both on 4 ranks (TP 2 x PP 2, sequence parallel)
        for key, np_, extra in (("tp2sp", 2, ["--tp", 2, "--sequence-parallel"]), ("pp2", 2, ["--pp", 2]),
                                ("tp2pp2", 4, ["--tp", 2, "--pp", 2, "--sequence-parallel"])):
            mpi = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np_), exe]
            met = os.path.join(w, f"metrics_{tag}_{key}.jsonl")
            save = os.path.join(w, f"saved_{tag}_{key}")
            label = f"[{tag}] train {' '.join(str(x) for x in extra)}"
            ok, msg = run_engine("mpirun", mpi + train_args(mdir, data, met, save, "none") + extra, met + ".log")
            if ok:
                compare_training(ck, label, met, save, ref_rows, ref_m)
            else:
                ck(label, False, msg)
        # ---- 3b. checkpointing modes train bit-identically
        for mode in modes[1:]:
            if "none" in runs and mode in runs:
                try:
                    l0 = [r["loss"] for r in common.read_metrics(runs["none"][0]) if "step" in r]
                    l1 = [r["loss"] for r in common.read_metrics(runs[mode][0]) if "step" in r]
                    same = len(l0) == STEPS and [repr(x) for x in l0] == [repr(x) for x in l1]
                    d = "" if same else f"none {l0} vs {mode} {l1}"
                except Exception as e:  # noqa: BLE001
                    same, d = False, str(e)
                ck(f"[{tag}] train losses bit-identical none vs {mode}", same, d)
                eq, d = tensors_bit_equal(os.path.join(runs["none"][1], "model.safetensors"),
                                          os.path.join(runs[mode][1], "model.safetensors"))
                ck(f"[{tag}] saved weights bit-identical none vs {mode}", eq, d)

        # ---- 4. the saved dir reloads (PyTorch and engine)
        if "none" in runs:
            save = runs["none"][1]
            try:
                sm = L.load_hf(save)
                scfg = common.config_read(save)
                keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                        "num_hidden_layers", "vocab_size", "tie_word_embeddings")
                cdiff = [k for k in keys if scfg.get(k) != cfg.to_dict()[k]]
                for k in ("rms_norm_eps", "rope_theta"):
                    if abs(float(scfg.get(k, -1)) - cfg.to_dict()[k]) > 1e-12 * cfg.to_dict()[k]:
                        cdiff.append(k)
                hdr, _, _ = common.st_read_header(os.path.join(save, "model.safetensors"))
                dts = sorted({v["dtype"] for v in hdr.values()})
                ok = not cdiff and dts == ["F32"]
                ck(f"[{tag}] saved dir loads in PyTorch (strict names/shapes, F32, config)", ok,
                   f"config fields differ: {cdiff}" if cdiff else f"dtypes {dts}, {len(hdr)} tensors")
            except Exception as e:  # noqa: BLE001
                ck(f"[{tag}] saved dir loads in PyTorch", False, str(e))
                continue
            out = os.path.join(w, f"dump_{tag}_reload.safetensors")
            ok, msg = run_engine(exe, dump_args(save, data, out, "none"), out + ".log")
            if not ok:
                ck(f"[{tag}] dump of the saved dir", False, msg)
                continue
            ref2 = L.dump(sm, stream, B, T)
            try:
                e = common.st_read(out)
                err = rel_err(e["logits"].reshape(ref2["logits"].shape), ref2["logits"])
                ck(f"[{tag}] saved dir as --model: logits vs PyTorch (2e-5 rel)", err <= DUMP_TOL,
                   f"rel {err:.2e}")
            except Exception as ex:  # noqa: BLE001
                ck(f"[{tag}] saved dir as --model: logits vs PyTorch", False, str(ex))

    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
