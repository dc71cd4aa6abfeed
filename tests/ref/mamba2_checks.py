"""tests/ref/mamba2_checks.py — the checks of tests/ref/test_torch_mamba2.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR."""
import argparse
import json
import os
import sys

import numpy as np
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
d2, _ = suite("g1-tied-bias-limit", c2, 8, [("1 rank", (), []),  # n_groups 1 < --tp 2: the group shared by the ranks
                                            ("2 ranks --tp 2", MPI, ["--tp", 2]),
                                            ("2 ranks --tp 2 --sequence-parallel", MPI,
                                             ["--tp", 2, "--sequence-parallel"])])
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

# ---- 3b. a state-spaces (mamba_ssm) Mamba-2 checkpoint: d_model / n_layer / ssm_cfg {layer: Mamba2, ...},
# the vocabulary padded to pad_vocab_size_multiple, backbone.embedding.weight and a stored tied lm_head copy
VP = (EC.VOCAB + 7) // 8 * 8
css = M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4, heads=8, groups=2, vocab=VP, tied=True)
ref_ss = M.init_model(css, seed=9)
ss_dir = os.path.join(w, "model_ss")
os.makedirs(ss_dir, exist_ok=True)
with open(os.path.join(ss_dir, "config.json"), "w") as f:
    json.dump({"d_model": 32, "n_layer": 2, "vocab_size": EC.VOCAB, "pad_vocab_size_multiple": 8,
               "tie_embeddings": True, "rms_norm": True, "residual_in_fp32": True, "d_intermediate": 0,
               "attn_layer_idx": [], "ssm_cfg": {"layer": "Mamba2", "d_state": 8, "d_conv": 4, "expand": 2,
                                                 "headdim": 8, "ngroups": 2}}, f)
sd = {("backbone.embedding.weight" if n == "backbone.embeddings.weight" else n): a
      for n, a in M.MR.state_numpy(ref_ss).items()}
sd["lm_head.weight"] = sd["backbone.embedding.weight"].copy()  # mamba_ssm stores the tied copy
common.st_write(os.path.join(ss_dir, "model.safetensors"), sd)
ref = {("grad.backbone.embedding.weight" if k == "grad.backbone.embeddings.weight" else k): v
       for k, v in M.dump(ref_ss, stream, B, T).items()}
out = os.path.join(w, "dump_ss.safetensors")
if engine(EC.dump_args(ss_dir, data, out, "none"), "dump_ss.log"):
    e = common.st_read(out)
    ck(f"[state-spaces] vocab {EC.VOCAB} padded to {VP} (logits width)", e["logits"].shape[-1] == VP,
       f"logits {list(e['logits'].shape)}")
    EC.compare_dump(ck, "[state-spaces] Mamba2 layer: dump vs PyTorch (backbone.embedding.weight)", out, ref,
                    [n[5:] for n in ref if n.startswith("grad.")])
rt = os.path.join(w, "rt_ss")
if engine(["train", "--model", ss_dir, "--data", data, "--steps", 0, "--micro-batch", B, "--seq-len", T, "--save", rt],
          "rt_ss.log"):
    try:
        back = M.load_hf(rt)
        same = all(torch.equal(p, q) for p, q in zip(back.parameters(), ref_ss.parameters()))
        ck("[state-spaces] --save writes the HF Mamba2ForCausalLM form (the same tensors)", same, "")
    except Exception as ex:  # noqa: BLE001
        ck("[state-spaces] --save writes the HF Mamba2ForCausalLM form", False, str(ex))

# ---- 4. packed documents: --doc-attention-mask restarts the conv and the scan at each document ----------
DOC_STARTS = np.cumsum([0, 37, 5, 120, 1, 64, 200, 88, 150])[:-1]  # EC.make_data's documents


def docs_dump(m, stream, reset=True):
    """The engine's dump with document masking, by running each document piece of a row on its own (a
    recurrent model restarted at a document start); reset False: the whole row (the negative control)."""
    m.zero_grad(set_to_none=True)
    x, y = M.L.batch(stream, 0, B, T)
    rows = []
    for r in range(B):
        cut = [0] + [int(d - r * T) for d in DOC_STARTS if reset and 0 < d - r * T < T] + [T]
        rows.append(torch.cat([m(x[r:r + 1, a:b]) for a, b in zip(cut, cut[1:])], dim=1))
    logits = torch.cat(rows, 0)
    loss = M.loss_fn(logits, y)
    loss.backward()
    out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(), "loss": np.array([loss.item()], np.float32)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().copy()
    return out


d_m1 = os.path.join(w, "model_mamba1")  # Mamba (v1) restarts its conv and scan the same way
M.MR.save_hf(M.MR.init_model(M.MR.make_config(hidden=32, layers=2, state=8, vocab=EC.VOCAB), seed=5, std=0.1,
                             jitter=0.1), d_m1)
for tag, mdir, load in (("g2", d1, M.load_hf), ("g1-tied-bias-limit", d2, M.load_hf), ("mamba1", d_m1, M.MR.load_hf)):
    mm = load(mdir)
    ref, ref_cont = docs_dump(mm, stream), docs_dump(mm, stream, reset=False)
    out = os.path.join(w, f"dump_docs_{tag}.safetensors")
    if engine(EC.dump_args(mdir, data, out, "none") + ["--doc-attention-mask", "true"], f"dump_docs_{tag}.log"):
        EC.compare_dump(ck, f"[{tag}] --doc-attention-mask: a packed row = its documents run separately (logits, "
                        f"loss, all grads, {EC.DUMP_TOL:g} rel)", out, ref, [n for n, _ in mm.named_parameters()])
        e = common.st_read(out)
        err = EC.rel_err(e["logits"].reshape(ref_cont["logits"].shape), ref_cont["logits"])
        ck(f"[{tag}] negative control: the row run without resets differs from the engine's",
           err > 100 * EC.DUMP_TOL, f"logits rel {err:.2e}")
        for mode in ("selective", "full"):
            o2 = os.path.join(w, f"dump_docs_{tag}_{mode}.safetensors")
            if engine(EC.dump_args(mdir, data, o2, mode) + ["--doc-attention-mask", "true"], f"docs_{tag}_{mode}.log"):
                eq, det = EC.tensors_bit_equal(out, o2)
                ck(f"[{tag}] --doc-attention-mask dump bit-identical none vs {mode}", eq, det)

# ---- 5. refusals by name ------------------------------------------------------------------------------
MPI3 = MPI[:-1] + ["3"]  # --tp 3: does not divide num_heads 4
ok, msg = EC.run_engine("mpirun", MPI3[1:] + [exe] + EC.train_args(d2, data, os.path.join(w, "m_tp.jsonl"),
                        os.path.join(w, "s_tp"), "none") + ["--tp", 3], os.path.join(w, "tp.log"))
log = open(os.path.join(w, "tp.log")).read()
ck("[refusal] --tp 3 of a model with num_heads 4 is refused naming num_heads, n_groups and the valid --tp",
   not ok and "num_heads 4 is not divisible by --tp 3 (n_groups 1)" in log
   and "valid --tp values for this model: 1, 2, 4" in log,
   next((ln for ln in log.splitlines() if "n_groups" in ln), msg))

print(f"{ck.passed} passed, {ck.failed} failed")
sys.exit(1 if ck.failed else 0)
