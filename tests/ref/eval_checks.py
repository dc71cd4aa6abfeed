"""Held-out evaluation checks: `shardlm eval` and the training loop's
--eval-data / --split against the PyTorch oracle and against each other.

Usage: eval_checks.py --shardlm PATH --work DIR [--mpirun]
Checks (one line each, then "N passed, M failed"):
  1. `shardlm eval --json` of a tiny Llama (GQA, untied) and a tiny Mamba vs
     the PyTorch forward on the same windows (mean token CE over K*T targets,
     1e-5 relative), K not a multiple of ranks x micro-batch; with --mpirun
     also at 2 ranks: ZeRO-3, ZeRO-1, ZeRO-3 with --offload-params cpu and
     --reshard-after-forward false;
  2. a 2-rank ZeRO-3 run with --eval-data logs eval_loss at the last step
     equal to `shardlm eval` of the model it saves (same layout: 1e-7
     relative), and its training losses equal those of the same run without
     evaluation (bit for bit: evaluation moves no data position, touches no
     optimizer state); also at ZeRO-2 with --grad-accum 2 --no-sync-accum;
  3. --split 6,2,0: the first training loss equals PyTorch's loss of the
     first batch of the training documents, and the logged eval_loss equals
     `shardlm eval` of the saved model on a dataset holding only the held-out
     documents (boundaries by Megatron's formula, computed here);
  4. N = 0 / missing --max-samples: exit 2 with a message;
  5. `shardlm plot` of the run's metrics: valid SVG with the held-out loss
     (one marker per evaluation), learning rate, gradient norm and per-arena
     peak memory panels (checked inside 2).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402
import mamba_ref as M  # noqa: E402

VOCAB, T, B = 97, 16, 3
TOL = 1e-5


class Checker:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        self.passed += bool(ok)
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        return ok


def run(cmd, cwd):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def ref_loss(model, stream, K):
    """Mean token CE of windows 0..K-1 (window j = stream[j*T .. j*T+T], wrapping)."""
    x, y = L.batch(stream, 0, K, T)
    with torch.no_grad():
        logits = model(x).double()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def make_docs(seed, lengths):
    rng = np.random.RandomState(seed)
    return [rng.randint(0, VOCAB, n) for n in lengths]


def megatron_split(weights, n):
    w = [float(x) for x in weights]
    s = sum(w)
    w = [x / s for x in w]
    idx = [0]
    for x in w:
        idx.append(idx[-1] + int(round(x * float(n))))
    diff = idx[-1] - n
    return [idx[0]] + [i - diff for i in idx[1:]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", action="store_true", help="also run the 2-rank checks")
    a = ap.parse_args()
    exe, W = a.shardlm, a.work
    ck = Checker()
    torch.manual_seed(0)

    data = os.path.join(W, "data")
    common.idx_write(data, make_docs(7, [37, 5, 120, 1, 64, 200, 88]), dtype=np.uint16)
    stream = common.token_stream(data)
    llama = L.init_model(L.make_config(vocab=VOCAB), seed=3, std=0.1)
    mamba = M.init_model(M.make_config(vocab=VOCAB), seed=4, std=0.1)
    mdirs = {"llama": os.path.join(W, "llama"), "mamba": os.path.join(W, "mamba")}
    os.makedirs(mdirs["llama"])
    os.makedirs(mdirs["mamba"])
    L.save_hf(llama, mdirs["llama"])
    M.save_hf(mamba, mdirs["mamba"])

    # 1. shardlm eval vs PyTorch
    K = 11  # not a multiple of 2 ranks x 3 rows: padding rows are ignored
    layouts = [("1 rank", [])]
    if a.mpirun:
        layouts += [("2 ranks ZeRO-3", ["--nproc", 2, "--zero", 3]),
                    ("2 ranks ZeRO-1", ["--nproc", 2, "--zero", 1]),
                    ("2 ranks ZeRO-3 offload-params cpu, no reshard", ["--nproc", 2, "--zero", 3,
                     "--offload-params", "cpu", "--reshard-after-forward", "false"])]
    for arch, model in (("llama", llama), ("mamba", mamba)):
        ref = ref_loss(model, stream, K)
        for label, extra in layouts:
            rc, out, err = run([exe, "eval", "--model", mdirs[arch], "--data", data, "--seq-len", T,
                                "--max-samples", K, "--micro-batch", B, "--json"] + extra, W)
            name = f"eval {arch} {label} vs PyTorch"
            if rc != 0:
                ck(name, False, f"exit {rc}: {err.strip()[-400:]}")
                continue
            j = json.loads(out.strip().splitlines()[-1])
            e = abs(j["loss"] - ref) / abs(ref)
            ok = e <= TOL and j["tokens"] == K * T and j["samples"] == K and \
                abs(j["perplexity"] - np.exp(ref)) / np.exp(ref) <= 2 * TOL
            ck(name, ok, f"loss {j['loss']:.8f} ref {ref:.8f} rel {e:.2e}, tokens {j['tokens']}")

    # 2. eval during a sharded run equals shardlm eval of the saved model
    held = os.path.join(W, "held")
    common.idx_write(held, make_docs(8, [50, 90, 17]), dtype=np.uint16)
    train = ["train", "--model", mdirs["llama"], "--data", data, "--data-order", "sequential",
             "--steps", 4, "--micro-batch", B, "--seq-len", T, "--lr", 3e-3, "--warmup", 1,
             "--summary", "false", "--plot", "false"]
    layout = ["--nproc", 2, "--zero", 3] if a.mpirun else []
    saved = os.path.join(W, "saved")
    rc, out, err = run([exe] + train + layout + ["--eval-data", held, "--eval-every", 3, "--eval-samples", 7,
                                                 "--metrics", os.path.join(W, "m_eval.jsonl"), "--save", saved], W)
    rc2, _, err2 = run([exe] + train + layout + ["--metrics", os.path.join(W, "m_plain.jsonl")], W)
    if rc != 0 or rc2 != 0:
        ck("training with --eval-data", False, f"exit {rc}/{rc2}: {(err + err2).strip()[-600:]}")
    else:
        rows = common.read_metrics(os.path.join(W, "m_eval.jsonl"))
        plain = common.read_metrics(os.path.join(W, "m_plain.jsonl"))
        at = [r["step"] for r in rows if "eval_loss" in r]
        ck("eval steps of --eval-every 3 --steps 4", at == [3, 4], f"eval_loss at steps {at}")
        same = [r["loss"] for r in rows] == [r["loss"] for r in plain] and \
            [r["grad_norm"] for r in rows] == [r["grad_norm"] for r in plain]
        ck("evaluation leaves training unchanged", same,
           f"losses {[round(r['loss'], 6) for r in rows]} vs {[round(r['loss'], 6) for r in plain]}")
        last = rows[-1]
        svg = os.path.join(W, "m_eval.svg")
        rc, out, err = run([exe, "plot", os.path.join(W, "m_eval.jsonl"), svg], W)
        try:
            import xml.etree.ElementTree as ET
            root = ET.parse(svg).getroot()
            texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
            # the held-out series: the line in its legend entry's colour, one point per evaluation
            hcol = [t.get("fill") for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text == "held-out loss"]
            line = [p for p in root.iter("{http://www.w3.org/2000/svg}polyline") if hcol and p.get("stroke") == hcol[0]]
            marks = line[0].get("points").split() if line else []
            want = ["loss", "held-out loss", "tokens/s", "learning rate", "gradient norm",
                    "peak memory per arena (MiB)", "params", "gather"]
            missing = [w for w in want if w not in texts]
            ck("plot: valid SVG with held-out loss, lr, grad norm and arena panels", rc == 0 and not missing
               and len(marks) == 2, f"missing {missing}, {len(marks)} held-out points")
        except Exception as e:  # noqa: BLE001
            ck("plot: valid SVG", False, f"exit {rc}: {e} {err.strip()[-200:]}")
        rc, out, err = run([exe, "eval", "--model", saved, "--data", held, "--seq-len", T, "--max-samples", 7,
                            "--micro-batch", B, "--json"] + layout, W)
        if rc != 0:
            ck("logged eval_loss vs shardlm eval", False, f"exit {rc}: {err.strip()[-400:]}")
        else:
            j = json.loads(out.strip().splitlines()[-1])
            e = abs(j["loss"] - last["eval_loss"]) / j["loss"]
            ck("logged eval_loss vs shardlm eval of the saved model", e <= 1e-7 and
               abs(last["eval_ppl"] - np.exp(last["eval_loss"])) <= 1e-6 * last["eval_ppl"],
               f"logged {last['eval_loss']:.9f} eval {j['loss']:.9f} rel {e:.2e}")
            sm = L.load_hf(saved)
            ref = ref_loss(sm, common.token_stream(held), 7)
            e = abs(j["loss"] - ref) / ref
            ck("shardlm eval of the saved model vs PyTorch", e <= TOL, f"rel {e:.2e}")

    if a.mpirun:  # ZeRO-2 with local accumulation: no stray gradient from the evaluation
        acc = ["--nproc", 2, "--zero", 2, "--grad-accum", 2, "--no-sync-accum", "true"]
        rc, _, err = run([exe] + train + acc + ["--eval-data", held, "--eval-every", 1, "--eval-samples", 5,
                                                "--metrics", os.path.join(W, "m_z2e.jsonl")], W)
        rc2, _, err2 = run([exe] + train + acc + ["--metrics", os.path.join(W, "m_z2.jsonl")], W)
        if rc != 0 or rc2 != 0:
            ck("ZeRO-2 accumulation with evaluation", False, f"exit {rc}/{rc2}: {(err + err2).strip()[-600:]}")
        else:
            e = common.read_metrics(os.path.join(W, "m_z2e.jsonl"))
            p = common.read_metrics(os.path.join(W, "m_z2.jsonl"))
            same = [(r["loss"], r["grad_norm"]) for r in e] == [(r["loss"], r["grad_norm"]) for r in p]
            ck("ZeRO-2 + grad-accum 2 + no-sync-accum: evaluation every step leaves training unchanged",
               same and all("eval_loss" in r for r in e), f"{len(e)} steps, eval at {sum('eval_loss' in r for r in e)}")

    # 3. --split over documents (Megatron's boundaries)
    docs = make_docs(9, [30, 41, 12, 77, 25, 60, 18, 33, 50, 29])
    sdata = os.path.join(W, "sdata")
    common.idx_write(sdata, docs, dtype=np.uint16)
    b = megatron_split([6, 2, 0], len(docs))
    tr_stream = np.concatenate(docs[b[0]:b[1]])
    hold_pref = os.path.join(W, "shold")
    common.idx_write(hold_pref, docs[b[1]:b[2]], dtype=np.uint16)
    saved2 = os.path.join(W, "saved2")
    G = B * (2 if a.mpirun else 1)
    rc, out, err = run([exe, "train", "--model", mdirs["llama"], "--data", sdata, "--data-order", "sequential",
                        "--steps", 2, "--micro-batch", B, "--seq-len", T, "--split", "6,2,0", "--eval-every", 2,
                        "--eval-samples", 5, "--summary", "false", "--plot", "false",
                        "--metrics", os.path.join(W, "m_split.jsonl"), "--save", saved2] + layout, W)
    if rc != 0:
        ck("--split training", False, f"exit {rc}: {err.strip()[-400:]}")
    else:
        rows = common.read_metrics(os.path.join(W, "m_split.jsonl"))
        x, y = L.batch(tr_stream, 0, G, T)
        with torch.no_grad():
            ref0 = L.loss_fn(llama(x), y).item()
        e = abs(rows[0]["loss"] - ref0) / ref0
        ck("--split: first training batch from the training documents", e <= TOL,
           f"docs [{b[0]},{b[1]}) train, [{b[1]},{b[2]}) held out; loss {rows[0]['loss']:.7f} ref {ref0:.7f}")
        rc, out, err = run([exe, "eval", "--model", saved2, "--data", hold_pref, "--seq-len", T,
                            "--max-samples", 5, "--micro-batch", B, "--json"] + layout, W)
        if rc != 0:
            ck("--split held-out range", False, f"exit {rc}: {err.strip()[-400:]}")
        else:
            j = json.loads(out.strip().splitlines()[-1])
            e = abs(j["loss"] - rows[-1]["eval_loss"]) / j["loss"]
            ck("--split: logged eval_loss = shardlm eval on the held-out documents", e <= 1e-7,
               f"logged {rows[-1]['eval_loss']:.9f} eval {j['loss']:.9f}")

    # 4. bad input
    for label, args, want in (("--max-samples 0", ["--max-samples", 0], "--max-samples"),
                              ("no --max-samples", [], "--max-samples")):
        rc, out, err = run([exe, "eval", "--model", mdirs["llama"], "--data", data, "--seq-len", T] + args, W)
        ck(f"eval {label}: exit 2", rc == 2 and want in err, f"exit {rc}: {err.strip()[:200]}")
    nodir = os.path.join(W, "noweights")
    os.makedirs(nodir)
    common.config_write(nodir, L.make_config(vocab=VOCAB).to_dict())
    rc, out, err = run([exe, "eval", "--model", nodir, "--data", data, "--seq-len", T, "--max-samples", 2], W)
    ck("eval of a model without weights: exit 2", rc == 2 and "weights" in err, f"exit {rc}: {err.strip()[:200]}")
    rc, out, err = run([exe, "train", "--model", mdirs["llama"], "--data", data, "--steps", 1, "--seq-len", T,
                        "--micro-batch", 1, "--eval-every", 1], W)
    ck("--eval-every without a held-out set: exit 2", rc == 2 and "--eval-data" in err,
       f"exit {rc}: {err.strip()[:200]}")
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
