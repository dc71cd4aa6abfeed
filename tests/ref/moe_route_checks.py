"""The mixture of experts' routing options vs PyTorch references written from
their sources: `--moe-capacity-factor` (Megatron-Core's
apply_router_token_dropping: capacity = ceil(tokens * k / E * F) per expert
and micro-batch, drop policy "probs": each expert keeps its slots of
largest routing weight, the dropped weights zeroed, not renormalised),
`--moe-z-loss-coef` (Megatron-Core's z_loss_func attached to each layer:
coef * mean(logsumexp(router logits)^2), summed over the layers) and
`--moe-balance bias` (torchtitan's expert_bias: added to the softmax scores
for the top-k selection only; after each step bias += rate * sign(mean
load - load), minus its mean). A tiny Mixtral (hidden 64, 2 layers, 4
experts, top-2) on llama_ref.py's blocks; the engine runs 10 AdamW steps,
2 micro-batches of 48 tokens a step (the capacity and the z-loss apply per
micro-batch, as Megatron's router sees its micro-batch).

Checks (one line each, then "N passed, M failed"):
  - capacity 1.0: the reference drops slots; dump (logits, loss, every
    gradient within 2e-5 relative), full checkpointing bit-identical; 10
    steps (loss, lr, grad_norm, weights 1e-4); moe_dropped per layer and
    moe_load (the selection before the capacity) equal the reference's at
    every step; negative control: the reference at capacity 1.25 misses.
    No near-tie: a capacity drop and the top-k choice are discontinuous, so
    along the 10 steps (2 micro-batches, 2 layers) the reference's smallest
    gap at the capacity boundary (an expert's last kept vs first dropped
    routing weight) and at the top-k boundary (a token's k-th vs (k+1)-th
    probability) must be >= GAP_MIN; the model's seed (CAP_SEED) is chosen
    to keep them clear; negative control: the old seed 31 had a tie at the
    capacity boundary at step 10 (the case parted from the reference on
    AVX-512) and the guard catches it.
  - z-loss 0.05: dump; 10 steps; moe_z_loss (the layers' mean of mean lse^2)
    within 1e-5 relative of the reference's; negative control: the reference
    with the coefficient doubled misses (loss, router gradients).
  - bias (rate 0.02) on a skewed router: 10 steps against the reference
    (loss, weights, loads at every step), the saved e_score_correction_bias
    tensors = the reference's final bias; with the router frozen (lr 1e-6,
    20 steps of 256 tokens) the max/mean load falls (1.67 at step 1 to 1.21
    over steps 16-20, measured); negative control: --moe-balance none stays
    near 1.58.
  - the bias is checkpointed: the step-5 manifest holds it; steps 6-10
    resumed from it equal the uninterrupted run's (loss, loads); negative
    control: resumed with --moe-balance none, step 6's loads differ.
  - the three options together at DP 2 (one micro-batch a rank) against
    one process (two micro-batches): losses within 1e-5, loads and drops equal.
  - refusals (exit 2 naming the flag): an unknown --moe-balance, a routing
    option on a dense model, a negative capacity, the z-loss under --pp.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402

NE, TOPK = 4, 2
CAP, Z_COEF, RATE = 1.0, 0.05, 0.02
# The capacity case's routing-weight gaps must stay >= GAP_MIN. Noise: the
# reference's routing weights in fp32 against the same run in fp64 differ by
# at most 6.6e-6 along the 10 steps (CAP_SEED, OPENBLAS_CORETYPE unset,
# Haswell, SkylakeX, Sandybridge, Zen, 1 and 2 threads; 3.5e-6 over 30 other
# seeds); the engine's fp32 differs from the reference's by at most their two
# errors, 1.3e-5, and 1.5e-4 is 11x that. CAP_SEED's smallest gaps: 2.47e-4
# (capacity), 1.54e-4 (top-k), each within 3e-7 on every core type. Seed 31
# (the other cases') ties at the capacity boundary at step 10: 6e-8 in fp32, 0
# in fp64 (two samples of a micro-batch begin with the same token).
GAP_MIN, CAP_SEED, TIED_SEED = 1.5e-4, 63, 31


class RouteBlock(L.SparseMoeBlock):
    """Mixtral's block with the routing options: cap (the capacity factor,
    0: dropless), bias (E) or None. Keeps the last forward's smallest gaps
    (top-k, capacity; inf where nothing is dropped): see GAP_MIN."""

    def __init__(self, c, cap=0.0):
        super().__init__(c)
        self.cap, self.bias, self.ne = cap, None, c.num_experts

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        n = h.shape[0]
        logits = self.gate(h)
        probs = F.softmax(logits, dim=1, dtype=torch.float)
        score = probs if self.bias is None else probs + self.bias  # torchtitan: selection only
        _, sel = torch.topk(score, self.top_k, dim=-1)
        ranked = torch.sort(score, dim=-1, descending=True).values
        self.gaps = [(ranked[:, self.top_k - 1] - ranked[:, self.top_k]).min().item(), math.inf]
        w = probs.gather(1, sel)
        if self.norm:
            w = w / w.sum(dim=-1, keepdim=True)
        keep = torch.ones_like(sel, dtype=torch.bool)
        if self.cap:  # Megatron's apply_router_token_dropping, drop_policy "probs", no padding
            routing_probs = torch.zeros(n, self.ne).scatter(1, sel, w)
            routing_map = torch.zeros(n, self.ne, dtype=torch.int).scatter(1, sel, 1).bool()
            capacity = math.ceil((n * self.top_k / self.ne) * self.cap)  # get_capacity(num_tokens * topk, ...)
            if capacity > n:
                cmask = torch.ones_like(routing_map)
            else:  # torch.topk(routing_probs, k=capacity, dim=0), its ties (identical tokens at position 0 of two
                # samples) broken by the earlier token: a stable descending sort
                idx = torch.argsort(routing_probs, dim=0, descending=True, stable=True)[:capacity]
                cmask = torch.zeros_like(routing_probs).scatter(0, idx, 1).bool()
                col = torch.sort(routing_probs, dim=0, descending=True).values  # an expert's weights, largest first
                over = routing_map.sum(0) > capacity  # the experts that drop
                if over.any():
                    self.gaps[1] = (col[capacity - 1] - col[capacity])[over].min().item()
            final = routing_map & cmask
            w = (routing_probs * final).gather(1, sel)
            keep = final.gather(1, sel)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where((sel == e) & keep)
            if tok.numel():
                out = out.index_add(0, tok, expert(h[tok]) * w[tok, slot, None])
        self.router_logits, self.selected, self.dropped = logits, sel, int((~keep).sum())
        return out.reshape(shape)


def blocks(m):
    return [layer.block_sparse_moe for layer in m.model.layers]


def with_routing(m, cap=0.0, bias=False):
    """m with RouteBlocks (the same weights)."""
    for layer in m.model.layers:
        old = layer.block_sparse_moe
        new = RouteBlock(m.config, cap)
        new.load_state_dict(old.state_dict())
        if bias:
            new.bias = torch.zeros(m.config.num_experts)
        layer.block_sparse_moe = new
    return m


def z_loss(coef):
    """Megatron's z_loss_func of every layer's last router logits, summed over the layers."""
    return lambda m: sum(coef * torch.logsumexp(b.router_logits, dim=-1).square().mean() for b in blocks(m))


def ref_train(mdir, stream, cap=0.0, zc=0.0, bias=False):
    """The reference's 10 steps (per micro-batch): rows, and per step the loads, drops, z values and each
    forward's gaps (micro-batch, layer, top-k gap, capacity gap)."""
    m = with_routing(L.load_hf(mdir), cap, bias)
    fw, orig = [], m.forward

    def fwd(*a, **k):
        out = orig(*a, **k)
        fw.append(([np.bincount(b.selected.reshape(-1).numpy(), minlength=NE).tolist() for b in blocks(m)],
                   [b.dropped for b in blocks(m)],
                   [torch.logsumexp(b.router_logits, dim=-1).square().mean().item() for b in blocks(m)],
                   [b.gaps for b in blocks(m)]))
        return out
    m.forward = fwd
    per_step = []

    def after_step(row):  # torchtitan's _update_expert_bias from the step's loads (optimizer pre-step; same effect)
        step = fw[-E.ACCUM:]
        load = np.sum([f[0] for f in step], axis=0)
        per_step.append((load.tolist(), np.sum([f[1] for f in step], axis=0).tolist(),
                         float(np.mean([f[2] for f in step])),
                         [(mb, la, *g) for mb, f in enumerate(step) for la, g in enumerate(f[3])]))
        if bias:
            with torch.no_grad():
                for b, ld in zip(blocks(m), load):
                    t = torch.tensor(ld, dtype=torch.float)
                    d = RATE * torch.sign(t.mean() - t)
                    b.bias.add_(d - d.mean())
    rows = L.train(m, stream, E.STEPS, E.B, E.T, E.ACCUM, E.HP["lr"], E.HP["min_lr"], E.HP["warmup"], E.HP["wd"],
                   E.HP["b1"], E.HP["b2"], E.HP["eps"], E.HP["clip"], whole_batch=False, log=after_step,
                   aux=z_loss(zc) if zc else None)
    return m, rows, per_step


def engine_train(ck, exe, w, tag, mdir, data, extra):
    met, save = os.path.join(w, f"metrics_{tag}.jsonl"), os.path.join(w, f"saved_{tag}")
    ok, msg = E.run_engine(exe, E.train_args(mdir, data, met, save, "none") + extra, met + ".log")
    if not ok:
        ck(f"[{tag}] train", False, msg)
        return None, None
    return [r for r in common.read_metrics(met) if "step" in r], (met, save)


def per_step_equal(ck, label, eng, ref):
    bad = next((i + 1 for i, (a, b) in enumerate(zip(eng, ref)) if a != b), None)
    ck(label, len(eng) == E.STEPS and bad is None,
       f"step 1 engine {eng[0] if eng else None}" if bad is None else
       f"step {bad}: engine {eng[bad - 1]} ref {ref[bad - 1]}")


def dump_vs(ck, exe, w, tag, mdir, data, ref, names, extra, modes=("none",)):
    outs = {}
    for mode in modes:
        out = os.path.join(w, f"dump_{tag}_{mode}.safetensors")
        ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, mode) + extra, out + ".log")
        if not ok:
            ck(f"[{tag}] dump --activation-checkpoint {mode}", False, msg)
            return None
        outs[mode] = out
    E.compare_dump(ck, f"[{tag}] dump vs PyTorch: logits, loss, all grads (2e-5 rel)", outs["none"], ref, names)
    for mode in modes[1:]:
        eq, d = E.tensors_bit_equal(outs["none"], outs[mode])
        ck(f"[{tag}] dump bit-identical none vs {mode}", eq, d)
    return common.st_read(outs["none"])


def misses(ck, label, eng, ref, keys):
    err = max(E.rel_err(eng[k].reshape(ref[k].shape), ref[k]) for k in keys)
    ck(label, err > 10 * E.DUMP_TOL, f"worst rel {err:.2e} (bound {E.DUMP_TOL:g})")


def capacity_model(w, seed):
    mdir = os.path.join(w, f"model_cap{seed}")
    L.save_hf(L.init_model(L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=32, vocab=E.VOCAB,
                                         family="mixtral", num_experts_per_tok=TOPK, num_local_experts=NE),
                           seed=seed, std=0.08, norm_jitter=0.1), mdir)
    return mdir


def smallest_gaps(steps):
    """(top-k gap, where), (capacity gap, where) smallest along the run's forwards."""
    at = [(g[2 + i], f"step {s + 1} micro-batch {g[0] + 1} layer {g[1]}") for i in (0, 1)
          for s, st in enumerate(steps) for g in st[3]]
    n = len(at) // 2
    return min(at[:n]), min(at[n:])


def gap_check(ck, label, steps):
    (sg, sw), (cg, cw) = smallest_gaps(steps)
    ok = sg >= GAP_MIN and cg >= GAP_MIN
    ck(label, ok, f"capacity boundary {cg:.3g} ({cw}), top-k {sg:.3g} ({sw}), bound {GAP_MIN:g}")
    return ok


def case_capacity(ck, exe, w, data, stream, _mdir, names):
    mdir = capacity_model(w, CAP_SEED)
    m = with_routing(L.load_hf(mdir), CAP)
    ref = L.dump(m, stream, E.B, E.T)
    drops = [b.dropped for b in blocks(m)]
    ck("[capacity] the reference drops slots at capacity factor 1.0", sum(drops) > 0, f"dropped per layer {drops}")
    eng = dump_vs(ck, exe, w, "capacity", mdir, data, ref, names, ["--moe-capacity-factor", CAP], ("none", "full"))
    if eng is not None:
        neg = L.dump(with_routing(L.load_hf(mdir), 1.25), stream, E.B, E.T)
        misses(ck, "[capacity] negative control: the reference at capacity 1.25 misses the engine", eng, neg,
               ["logits"])
    rows, paths = engine_train(ck, exe, w, "capacity", mdir, data, ["--moe-capacity-factor", CAP])
    if rows is None:
        return
    ref_m, ref_rows, steps = ref_train(mdir, stream, cap=CAP)
    gap_check(ck, f"[capacity] no near-tie along the 10 steps: the reference's smallest capacity-boundary and top-k "
              f"gaps of routing weight >= {GAP_MIN:g}", steps)
    _, _, tied = ref_train(capacity_model(w, TIED_SEED), stream, cap=CAP)
    (_, _), (cg, cw) = smallest_gaps(tied)
    ck(f"[capacity] negative control: the guard catches seed {TIED_SEED}'s tie at the capacity boundary",
       cg < GAP_MIN, f"capacity boundary {cg:.3g} ({cw})")
    E.compare_training(ck, "[capacity] train", paths[0], paths[1], ref_rows, ref_m)
    per_step_equal(ck, "[capacity] moe_dropped per layer equals the reference's drops at every step",
                   [r.get("moe_dropped") for r in rows], [s[1] for s in steps])
    per_step_equal(ck, "[capacity] moe_load (the selection before the capacity) equals the reference's",
                   [r.get("moe_load") for r in rows], [s[0] for s in steps])


def case_z(ck, exe, w, data, stream, mdir, names):
    m = with_routing(L.load_hf(mdir))
    ref = L.dump(m, stream, E.B, E.T, z_loss(Z_COEF))
    eng = dump_vs(ck, exe, w, "z_loss", mdir, data, ref, names, ["--moe-z-loss-coef", Z_COEF], ("none", "full"))
    if eng is not None:
        neg = L.dump(m, stream, E.B, E.T, z_loss(2 * Z_COEF))
        misses(ck, "[z_loss] negative control: the reference with the coefficient doubled misses the engine "
               "(loss, router grads)", eng, neg, ["loss"] + [k for k in neg if ".gate." in k])
    rows, paths = engine_train(ck, exe, w, "z_loss", mdir, data, ["--moe-z-loss-coef", Z_COEF])
    if rows is None:
        return
    ref_m, ref_rows, steps = ref_train(mdir, stream, zc=Z_COEF)
    E.compare_training(ck, "[z_loss] train", paths[0], paths[1], ref_rows, ref_m)
    ez, rz = [r.get("moe_z_loss", float("nan")) for r in rows], [s[2] for s in steps]
    err = max(abs(a - b) / abs(b) for a, b in zip(ez, rz))
    ck("[z_loss] moe_z_loss (the layers' mean of mean lse^2) within 1e-5 rel of the reference's at every step",
       len(ez) == E.STEPS and err <= 1e-5, f"max rel {err:.2e}; step 1 engine {ez[0]:.6f} ref {rz[0]:.6f}")


def skewed(mdir_in, mdir_out):
    """The model with a router that sends most tokens to expert 0: a direction u shared by every embedding row,
    expert 0's router row along u."""
    m = L.load_hf(mdir_in)
    g = torch.Generator().manual_seed(5)
    u = torch.randn(m.config.hidden_size, generator=g)
    u = u / u.norm()
    with torch.no_grad():
        m.model.embed_tokens.weight.add_(0.25 * u)
        for b in blocks(m):
            b.gate.weight[0].add_(2.0 * u)
    L.save_hf(m, mdir_out)


def imbalance(load):
    """The layers' mean of max / mean tokens per expert (1: even)."""
    return sum(max(r) * len(r) / sum(r) for r in load) / len(load)


def case_bias(ck, exe, w, data, stream, mdir):
    sk = os.path.join(w, "skewed")
    skewed(mdir, sk)
    ckdir = os.path.join(w, "ck_a")  # its checkpoints: case_resume's
    rows, paths = engine_train(ck, exe, w, "bias", sk, data, ["--moe-balance", "bias", "--moe-bias-rate", RATE,
                                                              "--ckpt-dir", ckdir, "--ckpt-every", 5])
    if rows is None:
        return
    ref_m, ref_rows, steps = ref_train(sk, stream, bias=True)
    E.compare_training(ck, "[bias] train", paths[0], paths[1], ref_rows, ref_m)
    per_step_equal(ck, "[bias] tokens per expert per layer equal the reference's (torchtitan's bias) at every step",
                   [r.get("moe_load") for r in rows], [s[0] for s in steps])
    saved = common.st_read(os.path.join(paths[1], "model.safetensors"))
    got = [np.asarray(saved.get(f"model.layers.{l}.block_sparse_moe.gate.e_score_correction_bias", [])).tolist()
           for l in range(len(blocks(ref_m)))]
    want = [b.bias.tolist() for b in blocks(ref_m)]
    err = max((abs(x - y) for g, r in zip(got, want) for x, y in zip(g, r)), default=float("inf"))
    ck("[bias] --save writes the bias as e_score_correction_bias (F32), the reference's final bias within 1e-6",
       all(len(g) == NE for g in got) and err <= 1e-6, f"max |d| {err:.1e}; saved {got}, reference {want}")
    # the bias alone (learning rate 1e-6: the router stays as initialised), 20 steps of 256 tokens
    frozen = ["--lr", 1e-6, "--min-lr", 1e-6, "--steps", 20, "--micro-batch", 8]
    late = {}
    for bal in ("bias", "none"):
        r, _ = engine_train(ck, exe, w, f"frozen_{bal}", sk, data,
                            ["--moe-balance", bal] + (["--moe-bias-rate", RATE] if bal == "bias" else []) + frozen)
        if r is None:
            return
        v = [imbalance(x["moe_load"]) for x in r]
        late[bal] = (v[0], sum(v[-5:]) / 5, " ".join(f"{x:.2f}" for x in v))
    first, lb = late["bias"][0], late["bias"][1]
    ck("[bias] a frozen skewed router's load evens out: max/mean of steps 16-20 at least 0.25 below step 1's",
       lb < first - 0.25, f"{late['bias'][2]}")
    ck("[bias] negative control: --moe-balance none stays skewed (steps 16-20 at least 0.15 above bias's)",
       late["none"][1] > lb + 0.15, f"none {late['none'][1]:.3f} vs bias {lb:.3f}: {late['none'][2]}")
    return rows


def case_resume(ck, exe, w, data, sk, full):
    """The expert bias is checkpointed: steps 6-10 resumed from step 5 equal the uninterrupted run's (full: case_bias's
    run, which wrote ck_a/step-000005)."""
    bias = ["--moe-balance", "bias", "--moe-bias-rate", RATE]
    ca, cb = os.path.join(w, "ck_a"), os.path.join(w, "ck_b")
    man = json.load(open(os.path.join(ca, "step-000005", "manifest.json")))
    b = man.get("moe_expert_bias", [])
    ck("[resume] the step-5 checkpoint holds the expert bias (layers x experts, not all zero)",
       len(b) == 2 * NE and any(b), f"{b}")
    os.makedirs(cb)
    shutil.copytree(os.path.join(ca, "step-000005"), os.path.join(cb, "step-000005"))
    open(os.path.join(cb, "latest"), "w").write("step-000005\n")
    key = [(r["loss"], r["moe_load"]) for r in full[5:]]
    for tag, flags in (("resumed", bias), ("resumed_none", ["--moe-balance", "none"])):
        c = os.path.join(w, "ck_" + tag)
        shutil.copytree(cb, c)
        rows, _ = engine_train(ck, exe, w, tag, sk, data, flags + ["--ckpt-dir", c, "--resume"])
        if rows is None:
            return
        got = [(r["loss"], r["moe_load"]) for r in rows if r["step"] > 5]
        if tag == "resumed":
            ck("[resume] steps 6-10 resumed from step 5 equal the uninterrupted run's (loss, moe_load)", got == key,
               f"step 6 engine {got[0] if got else None} uninterrupted {key[0]}")
        else:
            ck("[resume] negative control: resumed with --moe-balance none (no bias), step 6's loads differ",
               got[:1] != key[:1] and got[0][1] != key[0][1], f"step 6 {got[0][1]} vs {key[0][1]}")


def case_ranks(ck, exe, w, data, sk):
    """All three options at once on 2 data-parallel ranks (1 micro-batch each) against one process (2 micro-batches):
    the same micro-batches, loads summed over the ranks."""
    opts = ["--moe-capacity-factor", CAP, "--moe-z-loss-coef", Z_COEF, "--moe-balance", "bias", "--moe-bias-rate", RATE]
    one, _ = engine_train(ck, exe, w, "one_rank", sk, data, opts)
    two, _ = engine_train(ck, exe, w, "two_ranks", sk, data, opts + ["--nproc", 2, "--grad-accum", 1])
    if one is None or two is None:
        return
    dl = max(abs(a["loss"] - b["loss"]) for a, b in zip(one, two))
    same = all(a[k] == b[k] for a, b in zip(one, two) for k in ("moe_load", "moe_dropped"))
    dz = max(abs(a["moe_z_loss"] - b["moe_z_loss"]) / a["moe_z_loss"] for a, b in zip(one, two))
    ck("[ranks] DP 2 = one process with capacity, z-loss and bias: losses 1e-5, moe_load and moe_dropped equal, "
       "moe_z_loss 1e-6 rel", len(two) == E.STEPS and dl <= 1e-5 and same and dz <= 1e-6,
       f"max|dloss| {dl:.2e}, loads/drops equal {same}, z rel {dz:.1e}; step 1 {two[0]['moe_dropped']}")


def case_refusals(ck, exe, w, data, mdir):
    """Bad input: exit 2 with a message naming the flag."""
    dense = os.path.join(w, "dense")
    L.save_hf(L.init_model(L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=32,
                                         vocab=E.VOCAB), seed=3), dense)
    base = ["train", "--data", data, "--steps", 1, "--micro-batch", E.B, "--seq-len", E.T]
    cases = ((["--model", mdir, "--moe-balance", "random"], "--moe-balance"),
             (["--model", dense, "--moe-capacity-factor", 1], "--moe-capacity-factor"),
             (["--model", mdir, "--moe-capacity-factor", -1], "--moe-capacity-factor"),
             (["--model", mdir, "--moe-z-loss-coef", 0.1, "--nproc", 2, "--pp", 2], "--moe-z-loss-coef"))
    for args, flag in cases:
        log = os.path.join(w, "refusal.log")
        r = subprocess.run([exe] + [str(a) for a in base + args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           cwd=w, timeout=120, text=True)
        ck(f"[refusal] {' '.join(str(a) for a in args[2:])}: exit 2 naming {flag}",
           r.returncode == 2 and flag in r.stdout, f"exit {r.returncode}: {r.stdout.strip()[-300:]}")
        open(log, "a").write(r.stdout)


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=32, vocab=E.VOCAB,
                        family="mixtral", num_experts_per_tok=TOPK, num_local_experts=NE)
    mdir = os.path.join(w, "model")
    L.save_hf(L.init_model(cfg, seed=31, std=0.08, norm_jitter=0.1), mdir)
    names = [n for n, _ in L.load_hf(mdir).named_parameters()]
    case_capacity(ck, exe, w, data, stream, mdir, names)
    case_z(ck, exe, w, data, stream, mdir, names)
    full = case_bias(ck, exe, w, data, stream, mdir)
    if full:
        case_resume(ck, exe, w, data, os.path.join(w, "skewed"), full)
    case_ranks(ck, exe, w, data, os.path.join(w, "skewed"))
    case_refusals(ck, exe, w, data, mdir)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
