"""tests/ref/granite_h_checks.py — the checks of tests/ref/test_torch_granite_h.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR. The shared pieces: hybrid_checks.py."""
import os

import torch

import granite_h_ref as G  # noqa: E402
import hybrid_checks as HC  # noqa: E402

H = HC.Harness(G)
ck = H.ck
EC = HC.EC

# The MoE model's seed and the top-k guard. The choice of experts is discontinuous: a token whose k-th and
# (k+1)-th router logits are nearer than the engine's rounding may pick other experts than the reference's (the
# engine ranks softmax(logits), the same order), so along the reference's dump and 10 steps the smallest such
# gap must be >= max(GAP_MIN, 20 x the fp32-vs-fp64 difference of the router logits along the same run, measured
# here each time: the engine's fp32 is at most the two fp32 errors from the reference's, and 20 x one of them is
# 10 x that). Measured at MOE_SEED (3,024 gaps: 3 MoE layers x 48 dump tokens + 10 x 96): smallest gap 1.19e-3
# (step 3, HF layer 1), fp32 vs fp64 8.96e-6 (OpenBLAS SkylakeX, the default here; 1.44e-5 .. 1.87e-5 with
# OPENBLAS_CORETYPE Haswell, Zen, Sandybridge; the gap the same to 3 digits on each, 1 and 2 threads). Gaps of
# seeds 0..44: 3.7e-6 .. 1.2e-3, the noise 4.4e-6 .. 9.9e-5 (which is why the bound follows the measured noise);
# GAP_MIN 1e-4 is ~8 x the median noise (1.2e-5), and MOE_SEED the seed of largest gap / noise (132). TIED_SEED:
# 3.7e-6 (step 7, HF layer 2; 3.3e-6 .. 4.1e-6 over the core types), which the guard must catch (its negative
# control).
GAP_MIN, MOE_SEED, TIED_SEED = 1e-4, 27, 17


def moe_blocks(m):
    return [layer.block_sparse_moe for layer in m.model.layers if layer.block_sparse_moe is not None]


# ---- 1. hybrid: mamba / attention / mamba (GQA, untied, conv bias); tied-bias: attention / mamba (MQA, tied,
# attention and in/out_proj biases, no conv bias); every multiplier != 1, one Mamba group --------------------
c1 = G.config_hybrid(HC.EC.VOCAB)
d1, dumps1, _ = H.suite("hybrid", c1, 7, HC.LAYOUTS)  # --tp 2: the one Mamba group shared by both ranks
c2 = G.config_tied_bias(HC.EC.VOCAB)
d2, dumps2, _ = H.suite("tied-bias", c2, 8, HC.LAYOUTS_SHORT)

# ---- 1b. moe: mamba / attention / mamba, every layer block_sparse_moe + shared_mlp (4 experts top-2 of width 24,
# the shared MLP of width 40, router_aux_loss_coef 0.001 with output_router_logits false: no load-balancing loss);
# every layout and expert parallelism; the routing: uneven, no near-tie, the engine's loads -----------------------
c3 = G.config_moe(HC.EC.VOCAB)
d3, dumps3, _ = H.suite("moe", c3, MOE_SEED, HC.LAYOUTS_EP)
K, NE, NL = c3.num_experts_per_tok, c3.num_local_experts, c3.num_hidden_layers
rec32, rec64 = H.moe_trace(d3, moe_blocks), H.moe_trace(d3, moe_blocks, torch.float64)
ld = HC.loads(rec32[0], NE)
ck("[moe] reference routing (dump batch): uneven loads", all(max(r) > min(r) for r in ld), f"tokens per expert {ld}")
noise = max(float((a[0].double() - b[0]).abs().max()) for f32, f64 in zip(rec32, rec64) for a, b in zip(f32, f64))
same = all(torch.equal(a[1], b[1]) for f32, f64 in zip(rec32, rec64) for a, b in zip(f32, f64))
gap, where = HC.smallest_gap(rec32, K, "HF layer")
bound = max(GAP_MIN, 20 * noise)
ck(f"[moe] no near-tie at the top-k boundary along the dump and 10 steps: smallest gap of router logits >= "
   f"max({GAP_MIN:g}, 20 x fp32-vs-fp64)", gap >= bound and same,
   f"{gap:.3g} ({where}); fp32 vs fp64 router logits {noise:.1e}, selections equal {same}; bound {bound:.2g}")
tied_dir = os.path.join(H.w, "model_moe_tied")
G.save_hf(G.init_model(c3, seed=TIED_SEED), tied_dir)
tgap, twhere = HC.smallest_gap(H.moe_trace(tied_dir, moe_blocks), K, "HF layer")
ck(f"[moe] negative control: the guard catches seed {TIED_SEED}'s near-tie", tgap < GAP_MIN, f"{tgap:.3g} ({twhere})")
met = os.path.join(H.w, "metrics_moe_1 rank.jsonl")
if os.path.exists(met):  # the engine's moe_load: a row per engine decoder layer, HF layer i = mixer 2i, FFN 2i + 1
    rows = [r for r in HC.common.read_metrics(met) if "step" in r]
    eng = [(r.get("moe_load") or [])[1::2] for r in rows]
    mixer_zero = all(all(v == 0 for x in (r.get("moe_load") or [])[0::2] for v in x) for r in rows)
    ck(f"[moe] train 1 rank: moe_load has a row per engine decoder layer ({2 * NL}: each HF layer's mixer, then its "
       "FFN), zeros for the mixer rows", rows and all(len(r.get("moe_load") or []) == 2 * NL for r in rows)
       and mixer_zero, f"step 1 {rows[0].get('moe_load') if rows else None}")
    want = [HC.loads(fw, NE) for fw in rec32[1:]]
    bad = next((i + 1 for i, (a, b) in enumerate(zip(eng, want)) if a != b), None)
    ck("[moe] train 1 rank: tokens per expert per HF layer (moe_load rows 2i + 1) equal the reference's selections "
       "at every step", len(eng) == HC.STEPS and bad is None,
       f"step 1 {eng[0] if eng else None}" if bad is None else f"step {bad}: engine {eng[bad - 1]} ref {want[bad - 1]}")

# ---- 2. negative controls: the reference without residual_multiplier, without logits_scaling, with RoPE; the MoE
# without the top-k renormalisation, without the shared MLP, with input_linear's gate / up halves swapped ---------
H.negative_controls(
    [(tag, d, dumps, dict(ignore=(k,)), f"{k} 1 (config {getattr(c, k):g})")
     for tag, d, dumps, c in (("hybrid", d1, dumps1, c1), ("tied-bias", d2, dumps2, c2))
     for k in ("residual_multiplier", "logits_scaling")]
    + [("hybrid", d1, dumps1, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layer"),
       ("moe", d3, dumps3, dict(moe_renorm=False), "the k weights the softmax over all 4 experts, not renormalised "
        "(Mixtral without renormalisation, Qwen3-MoE's norm_topk_prob false)"),
       ("moe", d3, dumps3, dict(moe_shared=False), "the shared MLP left out of the MoE layers"),
       ("moe", d3, dumps3, dict(moe_swap=True), "input_linear's gate / up halves swapped (silu on the second)")])

# ---- 3. HF round trip, config forms --------------------------------------------------------------------------
for tag, mdir in (("hybrid", d1), ("tied-bias", d2)):
    H.round_trip(tag, mdir, G.GraniteHConfig, "GraniteMoeHybridForCausalLM, layer_types, the multipliers")
H.round_trip("moe", d3, G.GraniteHConfig, "the MoE fields; the 3-D expert tensors (E, 2I, C), (E, C, I)")
for what, edit in (("no 'architectures': the family from model_type 'granitemoehybrid'", "arch"),
                   ("no position_embedding_type (transformers' None: no RoPE either)", "pet")):
    d = c1.to_dict()
    del d["architectures" if edit == "arch" else "position_embedding_type"]
    H.config_form(what, edit, d1, dumps1.get("none"), d)

# ---- 4. packed documents: --doc-attention-mask restarts conv and scan and masks attention at each document --
H.doc_mask((("hybrid", d1), ("tied-bias", d2), ("moe", d3)))
H.finish()
