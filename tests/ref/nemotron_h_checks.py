"""tests/ref/nemotron_h_checks.py — the checks of tests/ref/test_torch_nemotron_h.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR. The shared pieces: hybrid_checks.py."""
import os

import torch

import hybrid_checks as HC  # noqa: E402
import nemotron_h_ref as N  # noqa: E402

H = HC.Harness(N)
ck = H.ck
EC = HC.EC

# The MoE model's seed and the top-k guard. The choice of experts is discontinuous: a token whose k-th and
# (k+1)-th choice scores (sigmoid + e_score_correction_bias) are nearer than the engine's rounding may pick
# other experts than the reference's, so along the reference's dump and 10 steps the smallest such gap must
# be >= max(GAP_MIN, 20 x the fp32-vs-fp64 difference of the choice scores along the same run, measured
# here each time: the engine's fp32 is at most the two fp32 errors from the reference's, and 20 x one of
# them is 10 x that). Measured at MOE_SEED: smallest gap 1.17e-4, fp32 vs fp64 7.6e-7 (gaps of 30 other
# seeds: 6.7e-6 .. 1.3e-4; moe_route_checks' GAP_MIN 1.5e-4, from the softmax weights' 6.6e-6 noise over
# OpenBLAS core types, would hold at almost no seed of this 1,920-gap run). TIED_SEED: 6.7e-6, which the
# guard must catch (its negative control).
GAP_MIN, MOE_SEED, TIED_SEED = 5e-5, 22, 37


def moe_blocks(m):
    return [layer.mixer for layer in m.backbone.layers if layer.kind == "moe"]


# ---- 1. hybrid: "M*M-" (two groups, GQA, untied); tied-bias-limit: "M-*" (one group, tied, every bias, a
# time_step_limit that clamps) -----------------------------------------------------------------------------
c1 = N.config_hybrid(HC.EC.VOCAB)
d1, dumps1, _ = H.suite("hybrid", c1, 7, HC.LAYOUTS)
c2 = N.config_tied_bias(HC.EC.VOCAB)
d2, dumps2, _ = H.suite("tied-bias-limit", c2, 8, HC.LAYOUTS_SHORT)
with torch.no_grad():  # the clamp bites: some softplus(dt + dt_bias) outside [0.002, 0.06] in the first batch
    mm = N.load_hf(d2)
    x, _ = N.L.batch(H.stream, 0, HC.B, HC.T)
    mix = mm.backbone.layers[0].mixer
    zx = mix.in_proj(mm.backbone.layers[0].norm(mm.backbone.embeddings(x)))
    dt = torch.nn.functional.softplus(zx[..., -c2.mamba_num_heads:] + mix.dt_bias)
    lo, hi = int((dt < 0.002).sum()), int((dt > 0.06).sum())
    ck("[tied-bias-limit] time_step_limit clamps values at both ends (layer 0)", lo > 0 and hi > 0,
       f"{lo} below, {hi} above of {dt.numel()}")

# ---- 1b. moe: "M*EME" (two 'E' layers: 4 experts top-2 of width 24, the shared expert of width 40,
# routed_scaling_factor 2.5, norm_topk_prob, n_group 1, a nonzero e_score_correction_bias); every layout and
# expert parallelism; the routing: uneven, the bias used, no near-tie, the engine's loads ----------------------
c3 = N.config_moe(HC.EC.VOCAB)
d3, dumps3, _ = H.suite("moe", c3, MOE_SEED, HC.LAYOUTS_EP)
K, NE = c3.num_experts_per_tok, c3.n_routed_experts
rec32, rec64 = H.moe_trace(d3, moe_blocks), H.moe_trace(d3, moe_blocks, torch.float64)
ld = HC.loads(rec32[0], NE)
ck("[moe] reference routing (dump batch): uneven loads", all(max(r) > min(r) for r in ld), f"tokens per expert {ld}")
with torch.no_grad():  # the bias is used: the reference without it picks other experts for some tokens
    mm = N.load_hf(d3, moe_bias=False)
    mm(N.L.batch(H.stream, 0, HC.B, HC.T)[0])
    nb = sum(int((torch.sort(a[1], 1).values != torch.sort(b.selected, 1).values).any(1).sum())
             for a, b in zip(rec32[0], moe_blocks(mm)))
ck("[moe] e_score_correction_bias changes the choice (dump batch)", nb > 0,
   f"{nb} of {HC.B * HC.T * len(ld)} token-layers choose other experts without it")
noise = max(float((a[0].double() - b[0]).abs().max()) for f32, f64 in zip(rec32, rec64) for a, b in zip(f32, f64))
same = all(torch.equal(a[1], b[1]) for f32, f64 in zip(rec32, rec64) for a, b in zip(f32, f64))
gap, where = HC.smallest_gap(rec32, K, "MoE layer")
bound = max(GAP_MIN, 20 * noise)
ck(f"[moe] no near-tie at the top-k boundary along the dump and 10 steps: smallest gap of choice scores >= "
   f"max({GAP_MIN:g}, 20 x fp32-vs-fp64)", gap >= bound and same,
   f"{gap:.3g} ({where}); fp32 vs fp64 choice scores {noise:.1e}, selections equal {same}; bound {bound:.2g}")
tied_dir = os.path.join(H.w, "model_moe_tied")
N.save_hf(N.init_model(c3, seed=TIED_SEED), tied_dir)
tgap, twhere = HC.smallest_gap(H.moe_trace(tied_dir, moe_blocks), K, "MoE layer")
ck(f"[moe] negative control: the guard catches seed {TIED_SEED}'s near-tie", tgap < GAP_MIN, f"{tgap:.3g} ({twhere})")
met = os.path.join(H.w, "metrics_moe_1 rank.jsonl")
if os.path.exists(met):  # the engine's moe_load (a row per decoder layer: its E layers' tokens per expert) = the ref's
    rows = [r for r in HC.common.read_metrics(met) if "step" in r]
    eng = [[x for x, kind in zip(r.get("moe_load") or [], c3.pattern) if kind == "E"] for r in rows]
    dense_zero = all(all(v == 0 for x, kind in zip(r.get("moe_load") or [], c3.pattern) if kind != "E" for v in x)
                     for r in rows)
    ck("[moe] train 1 rank: moe_load has a row per decoder layer, zeros for the layers without experts",
       rows and all(len(r.get("moe_load") or []) == len(c3.pattern) for r in rows) and dense_zero, "")
    want = [HC.loads(fw, NE) for fw in rec32[1:]]
    bad = next((i + 1 for i, (a, b) in enumerate(zip(eng, want)) if a != b), None)
    ck("[moe] train 1 rank: tokens per expert per MoE layer (moe_load) equal the reference's selections at every "
       "step", len(eng) == HC.STEPS and bad is None,
       f"step 1 {eng[0] if eng else None}" if bad is None else f"step {bad}: engine {eng[bad - 1]} ref {want[bad - 1]}")

# ---- 2. negative controls: RoPE in the attention layers; transformers' Mamba2 whole-width gated norm; the MoE
# router's softmax scores instead of the sigmoid, routed_scaling_factor ignored, the bias ignored ---------------
H.negative_controls((
    ("hybrid", d1, dumps1, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layers"),
    ("tied-bias-limit", d2, dumps2, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layer"),
    ("hybrid", d1, dumps1, dict(norm_groups=1), "the whole-width gated norm (transformers' Mamba2) at n_groups 2"),
    ("moe", d3, dumps3, dict(moe_score="softmax"), "the router's softmax scores (DeepSeek-V2's) for the sigmoid"),
    ("moe", d3, dumps3, dict(moe_scale=False), "routed_scaling_factor ignored (1, config 2.5)"),
    ("moe", d3, dumps3, dict(moe_bias=False), "e_score_correction_bias ignored in the choice")))

# ---- 3. HF round trip (Python's Infinity), config forms -------------------------------------------------
txt = open(os.path.join(d1, "config.json")).read()
ck("[config] the reference's config.json carries Python's bare Infinity", "Infinity" in txt, "")
for tag, mdir in (("hybrid", d1), ("tied-bias-limit", d2)):
    H.round_trip(tag, mdir, N.NemotronHConfig, "NemotronHForCausalLM, the pattern, Infinity included")
H.round_trip("moe", d3, N.NemotronHConfig, "the MoE fields; the tensors include the routers' e_score_correction_bias")
for what, edit in (("no 'architectures': the family from model_type 'nemotron_h'", "arch"),
                   ("attention_head_dim (Nemotron-H-8B's name) instead of head_dim", "ahd")):
    d = c1.to_dict()
    if edit == "arch":
        del d["architectures"]
    else:
        d["attention_head_dim"] = d.pop("head_dim")
    H.config_form(what, edit, d1, dumps1.get("none"), d)

# ---- 4. packed documents: --doc-attention-mask restarts conv and scan and masks attention at each document --
H.doc_mask((("hybrid", d1), ("tied-bias-limit", d2), ("moe", d3)))
H.finish()
