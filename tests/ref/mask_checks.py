"""Loss masks (PREFIX.lmask) and --doc-attention-mask against the PyTorch oracle.

Usage: mask_checks.py --shardlm PATH --work DIR
Data: packed documents of a tiny vocabulary, each ending with the EOD token
96, and a loss mask written by tests/lib/lmask.py (per document a "prompt"
of 0s then a "completion" of 1s, as fine-tuning data has). The reference is
llama_ref with ignore_index=-100 targets, a block-diagonal causal mask and
positions restarting per document (Megatron's reset_attention_mask /
reset_position_ids; the documents are the .idx's, which here also end with
the EOD token), loss = mean over the unmasked targets of the whole global
batch.
Checks (one line each, then "N passed, M failed"):
  1. dump (masks + documents, and masks only; Mamba with masks; Gemma 2 with
     masks + documents: softcaps and its window inside documents) vs PyTorch:
     logits, loss, every gradient to 2e-5 relative;
  2. 10 AdamW steps (grad_accum 2), masks + documents: per-step loss 1e-4,
     grad_norm 1e-4 rel, final weights 1e-4 (the existing reference tolerances),
     and the metrics' loss_tokens equal the reference's unmasked count;
  3. the same run on 2 ranks (ZeRO-3) and 3 ranks (ZeRO-2 / ZeRO-3): per-step
     losses (1e-5 relative) and final weights (5e-5 relative L2) equal the 1-rank run.
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402
import mamba_ref as M  # noqa: E402
from lmask import write_lmask  # noqa: E402

VOCAB, EOD, T, B, ACCUM, STEPS = E.VOCAB, 96, E.T, E.B, E.ACCUM, E.STEPS
HP = E.HP
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


DOC_STARTS = set()  # stream positions where a document of the .idx starts


def make_data(prefix):
    """Documents of 1..60 tokens ending in EOD; mask 0 on a prompt part."""
    rng = np.random.RandomState(99)
    lengths = [9, 1, 23, 2, 41, 17, 60, 5, 33, 12, 28, 3, 50, 19, 7, 38]
    docs, mask = [], []
    for n in lengths:
        d = np.concatenate([rng.randint(0, EOD, n - 1), [EOD]]) if n > 1 else np.array([EOD])
        docs.append(d)
        p = rng.randint(0, n)  # prompt length: tokens whose prediction does not count
        mask.append(np.concatenate([np.zeros(p), np.ones(n - p)]))
    common.idx_write(prefix, docs, dtype=np.uint16)
    DOC_STARTS.update(np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist())
    m = np.concatenate(mask).astype(np.uint8)
    write_lmask(prefix, m)
    return common.token_stream(prefix), m


def batch(stream, mask, first, count, docs):
    """Samples first..first+count-1 (sequential order): inputs, targets with
    -100 where the mask drops them, document starts (or None)."""
    n = len(stream)
    xs, ys, ss = [], [], []
    for j in range(first, first + count):
        idx = (j * T + np.arange(T + 1)) % n
        row = stream[idx]
        y = np.where(mask[idx[1:]] == 1, row[1:], -100)
        seg, start = np.zeros(T, dtype=np.int64), 0
        for i in range(T):
            if i > 0 and idx[i] in DOC_STARTS:  # the .idx's documents (each also ends with EOD here)
                start = i
            seg[i] = start
        xs.append(row[:-1])
        ys.append(y)
        ss.append(seg)
    t = lambda a: torch.from_numpy(np.stack(a).astype(np.int64))
    return t(xs), t(ys), (t(ss) if docs else None)


def ref_dump(m, stream, mask, docs):
    m.zero_grad(set_to_none=True)
    x, y, seg = batch(stream, mask, 0, B, docs)
    logits = m(x, seg) if docs else m(x)
    loss = L.loss_fn(logits, y)
    loss.backward()
    out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().copy()
    return out


def ref_train(m, stream, mask):
    opt = L.make_optimizer(m, HP["lr"], HP["wd"], HP["b1"], HP["b2"], HP["eps"])
    params = [p for _, p in m.named_parameters()]
    G, rows = B * ACCUM, []
    for s in range(STEPS):
        cur = L.lr_at(s, HP["lr"], HP["min_lr"], HP["warmup"], STEPS)
        for grp in opt.param_groups:
            grp["lr"] = cur
        opt.zero_grad(set_to_none=True)
        x, y, seg = batch(stream, mask, s * G, G, True)
        loss = L.loss_fn(m(x, seg), y)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, HP["clip"]))
        opt.step()
        rows.append({"step": s + 1, "loss": loss.item(), "lr": cur, "grad_norm": gn,
                     "tokens": int((y != -100).sum())})
    return rows


def main():
    ck, exe, w, data = E.start()
    stream, mask = make_data(data)
    cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=160, vocab=VOCAB)
    mdir = os.path.join(w, "model")
    L.save_hf(L.init_model(cfg, seed=11, std=0.08, norm_jitter=0.1), mdir)
    names = [n for n, _ in L.load_hf(mdir).named_parameters()]
    doc_flags = ["--doc-attention-mask", "true", "--eod-id", EOD]

    # ---- 1. dumps
    for docs in (True, False):
        tag = "masks + documents" if docs else "masks"
        ref = ref_dump(L.load_hf(mdir), stream, mask, docs)
        out = os.path.join(w, f"dump_{int(docs)}.safetensors")
        ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, "none") + (doc_flags if docs else []), out + ".log")
        if not ok:
            ck(f"dump ({tag})", False, msg)
            continue
        E.compare_dump(ck, f"dump vs PyTorch ({tag}): logits, loss, all grads (2e-5 rel)", out, ref, names)

    # Mamba shares the LM head and its masked loss
    mm = os.path.join(w, "mamba")
    M.save_hf(M.init_model(M.make_config(vocab=VOCAB, tied=False), seed=3, std=0.1, jitter=0.1), mm)
    ref = ref_dump(M.load_hf(mm), stream, mask, False)
    out = os.path.join(w, "dump_mamba.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(mm, data, out, "none"), out + ".log")
    if ok:
        E.compare_dump(ck, "Mamba dump vs PyTorch (masks): logits, loss, all grads (2e-5 rel)", out, ref,
                       [n for n, _ in M.load_hf(mm).named_parameters()])
    else:
        ck("Mamba dump (masks)", False, msg)

    # Gemma 2 with documents: the softcapped scores, the window on even layers and the masks together
    gd = os.path.join(w, "gemma2")
    gcfg = L.make_config(hidden=64, layers=3, heads=4, kv_heads=2, intermediate=96, vocab=VOCAB, tied=True,
                         head_dim=16, family="gemma2", sliding_window=5, attn_logit_softcapping=0.5,
                         final_logit_softcapping=0.8, query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh")
    L.save_hf(L.init_model(gcfg, seed=23, std=0.08, norm_jitter=0.1), gd)
    ref = ref_dump(L.load_hf(gd), stream, mask, True)
    out = os.path.join(w, "dump_gemma2.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(gd, data, out, "none") + doc_flags, out + ".log")
    if ok:
        E.compare_dump(ck, "Gemma 2 dump vs PyTorch (masks + documents): logits, loss, all grads (2e-5 rel)", out, ref,
                       [n for n, _ in L.load_hf(gd).named_parameters()])
    else:
        ck("Gemma 2 dump (masks + documents)", False, msg)

    # ---- 2. training, one rank
    ref_m = L.load_hf(mdir)
    ref_rows = ref_train(ref_m, stream, mask)
    runs = {}
    for name, np_, mb, ga, extra in (("r1", 1, B, ACCUM, ["--zero", 0]), ("r2z3", 2, B, 1, ["--zero", 3]),
                                     ("r3z3", 3, 2, 1, ["--zero", 3]), ("r3z2", 3, 1, 2, ["--zero", 2])):
        d = os.path.join(w, name)
        os.makedirs(d, exist_ok=True)
        args = E.train_args(mdir, data, os.path.join(d, "metrics.jsonl"), os.path.join(d, "model"), "none")
        args[args.index("--micro-batch") + 1] = mb
        args[args.index("--grad-accum") + 1] = ga
        args += doc_flags + extra + ["--threads", 1, "--summary", "false", "--plot", "false"]
        if np_ == 1:
            ok, msg = E.run_engine(exe, args, os.path.join(d, "log"))
        else:
            cmd = MPI + ["-np", str(np_), exe] + [str(x) for x in args]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=d, timeout=300)
            ok, msg = r.returncode == 0, r.stdout.decode()[-1500:]
        if not ok:
            ck(f"train {name}", False, msg)
            continue
        runs[name] = d
    if "r1" in runs:
        d = runs["r1"]
        E.compare_training(ck, "[masks + documents] train 1 rank", os.path.join(d, "metrics.jsonl"),
                           os.path.join(d, "model"), ref_rows, ref_m)
        got = [r.get("loss_tokens") for r in common.read_metrics(os.path.join(d, "metrics.jsonl")) if "step" in r]
        want = [r["tokens"] for r in ref_rows]
        ck("metrics loss_tokens == reference unmasked targets per step", got == want, f"engine {got} ref {want}")
    # ---- 3. ranks
    for name in ("r2z3", "r3z3", "r3z2"):
        if "r1" in runs and name in runs:
            cmd = ["/usr/bin/python3", os.path.join(HERE, "..", "lib", "compare.py"), runs[name], runs["r1"],
                   "--rtol", "1e-5"]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            ck(f"[masks + documents] {name} == 1 rank (losses 1e-5, weights 5e-5 L2)", r.returncode == 0, r.stdout.decode().strip())
            if name == "r3z3":  # the negative control: planted errors must fail the same comparison
                for kind in ("norm", "row"):
                    r = subprocess.run(cmd + ["--plant", kind], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                    ck(f"[masks + documents] planted {kind} error in {name} fails that comparison",
                       r.returncode == 1, r.stdout.decode().strip())
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
