"""tests/ref/granite_h_checks.py — the checks of tests/ref/test_torch_granite_h.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR. The shared pieces: hybrid_checks.py."""
import granite_h_ref as G  # noqa: E402
import hybrid_checks as HC  # noqa: E402

H = HC.Harness(G)

# ---- 1. hybrid: mamba / attention / mamba (GQA, untied, conv bias); tied-bias: attention / mamba (MQA, tied,
# attention and in/out_proj biases, no conv bias); every multiplier != 1, one Mamba group --------------------
c1 = G.config_hybrid(HC.EC.VOCAB)
d1, dumps1, _ = H.suite("hybrid", c1, 7, HC.LAYOUTS)  # --tp 2: the one Mamba group shared by both ranks
c2 = G.config_tied_bias(HC.EC.VOCAB)
d2, dumps2, _ = H.suite("tied-bias", c2, 8, HC.LAYOUTS_SHORT)

# ---- 2. negative controls: the reference without residual_multiplier, without logits_scaling, with RoPE ----
H.negative_controls(
    [(tag, d, dumps, dict(ignore=(k,)), f"{k} 1 (config {getattr(c, k):g})")
     for tag, d, dumps, c in (("hybrid", d1, dumps1, c1), ("tied-bias", d2, dumps2, c2))
     for k in ("residual_multiplier", "logits_scaling")]
    + [("hybrid", d1, dumps1, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layer")])

# ---- 3. HF round trip, config forms --------------------------------------------------------------------------
for tag, mdir in (("hybrid", d1), ("tied-bias", d2)):
    H.round_trip(tag, mdir, G.GraniteHConfig, "GraniteMoeHybridForCausalLM, layer_types, the multipliers")
for what, edit in (("no 'architectures': the family from model_type 'granitemoehybrid'", "arch"),
                   ("no position_embedding_type (transformers' None: no RoPE either)", "pet")):
    d = c1.to_dict()
    del d["architectures" if edit == "arch" else "position_embedding_type"]
    H.config_form(what, edit, d1, dumps1.get("none"), d)

# ---- 4. packed documents: --doc-attention-mask restarts conv and scan and masks attention at each document --
H.doc_mask((("hybrid", d1), ("tied-bias", d2)))
H.finish()
