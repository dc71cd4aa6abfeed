"""tests/ref/mamba2_checks.py — the checks of tests/ref/test_torch_mamba2.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR."""
import argparse
import json
import os
import sys

import torch

import common  # noqa: E402
import engine_checks as EC  # noqa: E402
import mamba2_ref as M  # noqa: E402

EC.L = M  # compare_training reloads the saved dir with EC.L.load_hf
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
    m = M.load_hf(mdir)
    return m, M.train(m, stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"], HP["wd"], HP["b1"],
                      HP["b2"], HP["eps"], HP["clip"])


def suite(tag, cfg, seed, layouts):
    mdir = os.path.join(w, "model_" + tag)
    M.save_hf(M.init_model(cfg, seed=seed), mdir)
    ref_m = M.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ref = M.dump(ref_m, stream, B, T)
    ref64 = M.dump(M.load_hf(mdir, torch.float64), stream, B, T)
    noise = max(EC.rel_err(ref[k], ref64[k]) for k in ref)
    dumps = EC.dump_modes(ck, exe, w, mdir, data, ref, names,
                          f"[{tag}] dump vs PyTorch: logits, loss, all grads ({EC.DUMP_TOL:g} rel; torch fp32 vs "
                          f"fp64 {noise:.1e})", tag)
    m, rows = ref_rows(mdir)
    nclip = sum(r["grad_norm"] > HP["clip"] for r in rows)
    ck(f"[{tag}] reference clipping active", nclip >= 1, f"{nclip}/{STEPS} steps")
    for name, pre, extra in layouts:
        met, save = os.path.join(w, f"metrics_{tag}_{name}.jsonl"), os.path.join(w, f"saved_{tag}_{name}")
        args = EC.train_args(mdir, data, met, save, "none")
        if "ZeRO" in name:  # 2 data-parallel ranks: half the accumulation keeps the global batch (and the data order)
            args[args.index("--grad-accum") + 1] = EC.ACCUM // 2
        if engine(args + extra, f"train_{tag}_{name}.log", pre):
            EC.compare_training(ck, f"[{tag}] train {name}", met, save, rows, m)
    return mdir, dumps


# ---- 1. two groups, untied, conv bias; one group, tied, biases, no conv bias, a clamp that bites ----
c1 = M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4, heads=8, groups=2, vocab=EC.VOCAB, chunk=16)
d1, dumps1 = suite("g2", c1, 7, [("1 rank", (), []),
                                  ("2 ranks ZeRO-3", MPI, ["--zero", 3]),
                                  ("2 ranks --tp 2", MPI, ["--tp", 2]),
                                  ("2 ranks --tp 2 --sequence-parallel", MPI, ["--tp", 2, "--sequence-parallel"]),
                                  ("2 ranks --pp 2 (1f1b)", MPI, ["--pp", 2, "--pp-schedule", "1f1b"]),
                                  ("2 ranks --pp 2 (zb1p)", MPI, ["--pp", 2, "--pp-schedule", "zb1p"]),
                                  ("2 ranks ZeRO-3 CPU offload", MPI, ["--zero", 3, "--offload-optimizer", "cpu"]),
                                  ("1 rank --activation-checkpoint full", (), ["--activation-checkpoint", "full"])])
c2 = M.make_config(hidden=32, layers=3, state=6, expand=2, conv=3, heads=4, groups=1, vocab=EC.VOCAB, chunk=8,
                   tied=True, limit=(0.002, 0.06))
c2.use_bias, c2.use_conv_bias = True, False
d2, _ = suite("g1-tied-bias-limit", c2, 8, [("1 rank", (), [])])
with torch.no_grad():  # the clamp bites: some softplus(dt + dt_bias) outside [0.002, 0.06] in the first batch
    mm = M.load_hf(d2)
    x, _ = M.L.batch(stream, 0, B, T)
    mix = mm.backbone.layers[0].mixer
    zx = mix.in_proj(mm.backbone.layers[0].norm(mm.backbone.embeddings(x)))
    dt = torch.nn.functional.softplus(zx[..., -c2.num_heads:] + mix.dt_bias)
    lo, hi = int((dt < 0.002).sum()), int((dt > 0.06).sum())
    ck("[g1-tied-bias-limit] time_step_limit clamps values at both ends (layer 0)", lo > 0 and hi > 0,
       f"{lo} below, {hi} above of {dt.numel()}")

# ---- 2. negative control: transformers' whole-width gated norm at n_groups 2 -------------------------
if dumps1.get("none"):
    whole = M.Mamba2ForCausalLM(c1, norm_groups=1)
    whole.load_state_dict(M.load_hf(d1).state_dict())
    ref_whole = M.dump(whole, stream, B, T)
    e = common.st_read(dumps1["none"])
    err = EC.rel_err(e["logits"].reshape(ref_whole["logits"].shape), ref_whole["logits"])
    ck("[negative control] the whole-width gated norm (transformers at n_groups 2) differs from the engine",
       err > 100 * EC.DUMP_TOL, f"logits rel {err:.2e}")

# ---- 3. HF round trip, Python's Infinity, config from model_type only ---------------------------------
txt = open(os.path.join(d1, "config.json")).read()
ck("[config] the reference's config.json carries Python's bare Infinity", "Infinity" in txt, "")
rt = os.path.join(w, "rt_g2")
if engine(["train", "--model", d1, "--data", data, "--steps", 0, "--micro-batch", B, "--seq-len", T, "--save", rt],
          "rt.log"):
    a = common.st_read(os.path.join(d1, "model.safetensors"), to_f32=False)
    b = common.st_read(os.path.join(rt, "model.safetensors"), to_f32=False)
    same = set(a) == set(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    ck("[round trip] --steps 0 --save: tensors byte-identical", same, f"{len(a)} tensors")
    try:
        c0, c1r = M.Mamba2Config(common.config_read(d1)), M.Mamba2Config(common.config_read(rt))
        ck("[round trip] saved config.json reads back the same (Infinity included)",
           c0.to_dict() == c1r.to_dict(), "" if c0.to_dict() == c1r.to_dict() else f"{c0.to_dict()} vs {c1r.to_dict()}")
        ck("[round trip] saved config.json writes time_step_limit as Python does",
           '"time_step_limit": [\n    0.0,\n    Infinity\n  ]' in open(os.path.join(rt, "config.json")).read()
           or "Infinity" in open(os.path.join(rt, "config.json")).read(), "")
    except Exception as ex:  # noqa: BLE001
        ck("[round trip] saved config.json", False, str(ex))
mt = os.path.join(w, "model_mt")
os.makedirs(mt, exist_ok=True)
d = c1.to_dict()
del d["architectures"]
with open(os.path.join(mt, "config.json"), "w") as f:
    json.dump(d, f)
os.link(os.path.join(d1, "model.safetensors"), os.path.join(mt, "model.safetensors"))
out = os.path.join(w, "dump_mt.safetensors")
if engine(EC.dump_args(mt, data, out, "none"), "dump_mt.log") and dumps1.get("none"):
    eq, det = EC.tensors_bit_equal(out, dumps1["none"])
    ck("[config] no 'architectures': the family from model_type 'mamba2' (dump bit-identical)", eq, det)

# ---- 4. refusal by name -------------------------------------------------------------------------------
ok, msg = EC.run_engine("mpirun", MPI[1:] + [exe] + EC.train_args(d2, data, os.path.join(w, "m_tp.jsonl"),
                        os.path.join(w, "s_tp"), "none") + ["--tp", 2], os.path.join(w, "tp.log"))
log = open(os.path.join(w, "tp.log")).read()
ck("[refusal] --tp 2 of a model with n_groups 1 is refused naming n_groups and the valid --tp",
   not ok and "n_groups 1" in log and "--tp" in log, next((ln for ln in log.splitlines() if "n_groups" in ln), msg))

print(f"{ck.passed} passed, {ck.failed} failed")
sys.exit(1 if ck.failed else 0)
