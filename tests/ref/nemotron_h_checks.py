"""tests/ref/nemotron_h_checks.py — the checks of tests/ref/test_torch_nemotron_h.sh (see its header),
run by tests/lib/torch_run.sh: --shardlm EXE --work DIR. The shared pieces: hybrid_checks.py."""
import os

import torch

import hybrid_checks as HC  # noqa: E402
import nemotron_h_ref as N  # noqa: E402

H = HC.Harness(N)
ck = H.ck

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

# ---- 2. negative controls: RoPE in the attention layers; transformers' Mamba2 whole-width gated norm -----
H.negative_controls((
    ("hybrid", d1, dumps1, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layers"),
    ("tied-bias-limit", d2, dumps2, dict(rope_theta=10000.0), "RoPE (theta 1e4) in the attention layer"),
    ("hybrid", d1, dumps1, dict(norm_groups=1), "the whole-width gated norm (transformers' Mamba2) at n_groups 2")))

# ---- 3. HF round trip (Python's Infinity), config forms -------------------------------------------------
txt = open(os.path.join(d1, "config.json")).read()
ck("[config] the reference's config.json carries Python's bare Infinity", "Infinity" in txt, "")
for tag, mdir in (("hybrid", d1), ("tied-bias-limit", d2)):
    H.round_trip(tag, mdir, N.NemotronHConfig, "NemotronHForCausalLM, the pattern, Infinity included")
for what, edit in (("no 'architectures': the family from model_type 'nemotron_h'", "arch"),
                   ("attention_head_dim (Nemotron-H-8B's name) instead of head_dim", "ahd")):
    d = c1.to_dict()
    if edit == "arch":
        del d["architectures"]
    else:
        d["attention_head_dim"] = d.pop("head_dim")
    H.config_form(what, edit, d1, dumps1.get("none"), d)

# ---- 4. packed documents: --doc-attention-mask restarts conv and scan and masks attention at each document --
H.doc_mask((("hybrid", d1), ("tied-bias-limit", d2)))
H.finish()
