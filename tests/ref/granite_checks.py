"""tests/ref/granite_checks.py — the checks of tests/ref/test_torch_granite.sh (see its header), run by
tests/lib/torch_run.sh: --shardlm EXE --work DIR. The oracle: granite_ref.py; the harness (dumps under
the checkpointing modes, 10 AdamW steps per layout, negative controls, HF round trip, config forms, packed
documents): hybrid_checks.py, engine_checks.py."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import granite_ref as G  # noqa: E402
import hybrid_checks as HC  # noqa: E402

H = HC.Harness(G)
ck, EC = H.ck, HC.EC
VOCAB, NEW = EC.VOCAB, 16
PROMPT = [5, 17, 3, 88, 42, 9, 60, 23]
# the layouts of 10 AdamW steps: the first config at every parallel layout engine_checks' Llama test runs
# but TP x PP (2 ranks here), the second at 1 rank and the pipeline (3 layers over 2 stages)
LAYOUTS = [HC.LAYOUTS[0], HC.LAYOUTS[1], HC.LAYOUTS[2], HC.LAYOUTS[3], HC.LAYOUTS[4],
           ("1 rank --activation-checkpoint full", (), ["--activation-checkpoint", "full"])]
LAYOUTS_SHORT = [HC.LAYOUTS[0], HC.LAYOUTS[4]]

# ---- 0. the oracle's own checks (vs transformers' forward written out, fp32 vs fp64, finite differences)
r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "granite_ref.py")],
                   capture_output=True, text=True)
tail = (r.stdout.strip().splitlines() or [""])[-1]
ck("reference self-checks (granite_ref.py: vs the forward written out, fp32/fp64, finite differences, config)",
   r.returncode == 0, tail if r.returncode == 0 else r.stdout[-1500:] + r.stderr[-500:])

# ---- 1. untied: 2 layers, GQA 4 / 2, no biases, default RoPE; tied: 3 layers, MQA 3 / 1, attention_bias and
# mlp_bias, llama3 rope_scaling; every multiplier != 1: dumps (logits, loss, every gradient; the checkpointing
# modes bit-identical), 10 AdamW steps per layout ------------------------------------------------------------
c1, c2 = G.config_untied(VOCAB), G.config_tied(VOCAB)
d1, dumps1, _ = H.suite("untied", c1, 7, LAYOUTS)
d2, dumps2, _ = H.suite("tied", c2, 8, LAYOUTS_SHORT)
for tag in ("untied", "tied"):
    save = os.path.join(H.w, f"saved_{tag}_1 rank")
    if os.path.isdir(save):
        s = common.config_read(save)
        ck(f"[{tag}] saved config is Granite (GraniteForCausalLM, model_type granite)",
           s.get("architectures") == [G.ARCH] and s.get("model_type") == G.MODEL_TYPE,
           f"{s.get('architectures')} {s.get('model_type')}")

# ---- 2. negative controls: the reference without each multiplier (taken as 1; attention_multiplier as
# head_dim^-0.5), and (tied) without the llama3 rope_scaling, far from the engine ----------------------------
H.negative_controls(
    [(tag, d, dumps, dict(ignore=(k,)), f"{k} 1 (config {getattr(c, k):g})" if k != "attention_multiplier" else
      f"the attention scale head_dim^-0.5 (config attention_multiplier {c.attention_multiplier:g})")
     for tag, d, dumps, c in (("untied", d1, dumps1, c1), ("tied", d2, dumps2, c2)) for k in G.MULTIPLIERS]
    + [("tied", d2, dumps2, dict(plain_rope=True), "no rope_scaling (llama3 dropped)")])

# ---- 3. HF round trip, config forms -------------------------------------------------------------------------
H.round_trip("untied", d1, G.GraniteConfig, "GraniteForCausalLM, the four multipliers")
H.round_trip("tied", d2, G.GraniteConfig, "tied, attention_bias, mlp_bias, llama3 rope_scaling, the multipliers")
d = c1.to_dict()
del d["architectures"]
H.config_form("no 'architectures': the family from model_type 'granite'", "arch", d1, dumps1.get("none"), d)
d = c2.to_dict()
d["rope_parameters"] = dict(d.pop("rope_scaling"), rope_theta=d.pop("rope_theta"))
H.config_form("rope_parameters (transformers 5) in place of rope_theta + rope_scaling", "rp", d2, dumps2.get("none"),
              d)
# no multipliers in config.json: transformers' defaults 1.0, the attention scale 1.0 (not head_dim^-0.5)
nm = os.path.join(H.w, "model_nomult")
common.config_write(nm, {k: v for k, v in c1.to_dict().items() if k not in G.MULTIPLIERS})
os.link(os.path.join(d1, "model.safetensors"), os.path.join(nm, "model.safetensors"))
ref_nm = G.load_hf(nm)
ok_scale = ref_nm.model.layers[0].self_attn.c.attn_scale == 1.0
out = os.path.join(H.w, "dump_nomult.safetensors")
if H.engine(EC.dump_args(nm, H.data, out, "none"), "dump_nomult.log"):
    EC.compare_dump(ck, "[config] no multipliers in config.json: transformers' defaults (all 1.0; scores q.k times "
                    "1.0, not head_dim^-0.5): dump vs PyTorch", out,
                    G.dump(ref_nm, H.stream, HC.B, HC.T), [n for n, _ in ref_nm.named_parameters()])
    ck("[config] (the reference's attention scale there is 1.0)", ok_scale)

# ---- 3b. YaRN: its attention_factor^2 scales the scores on top of attention_multiplier (transformers' rotary
# tables carry the factor; default attention_factor 0.1 ln(4) + 1 here); negative control: the reference with
# attention_factor 1 (the factor dropped, what the engine did before) misses the engine's dump ------------------
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
c3 = G.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=VOCAB,
                   rope_scaling=dict(YARN), max_position_embeddings=32)
d3 = os.path.join(H.w, "model_yarn")
G.save_hf(G.init_model(c3, seed=9), d3)
m3 = G.load_hf(d3)
ref3 = G.dump(m3, H.stream, HC.B, HC.T)
out = os.path.join(H.w, "dump_yarn.safetensors")
if H.engine(EC.dump_args(d3, H.data, out, "none"), "dump_yarn.log"):
    EC.compare_dump(ck, "[yarn] dump vs PyTorch (attention_multiplier x attention_factor^2)", out, ref3,
                    [n for n, _ in m3.named_parameters()])
    nf = os.path.join(H.w, "model_yarn_nofactor")
    common.config_write(nf, dict(c3.to_dict(), rope_scaling=dict(YARN, attention_factor=1.0)))
    os.link(os.path.join(d3, "model.safetensors"), os.path.join(nf, "model.safetensors"))
    ref_nf = G.dump(G.load_hf(nf), H.stream, HC.B, HC.T)
    eng = common.st_read(out)["logits"].reshape(ref_nf["logits"].shape)
    err = EC.rel_err(eng, ref_nf["logits"])
    ck("[yarn] negative control: the reference without the attention factor (attention_factor 1) misses the "
       "engine", err > 10 * EC.DUMP_TOL, f"logits rel {err:.2e} (bound {EC.DUMP_TOL:g})")

# ---- 4. packed documents: --doc-attention-mask (positions restart, attention within the document) ---------
H.doc_mask((("untied", d1),))

# ---- 5. greedy generation: `shardlm generate` vs the reference's greedy full recompute ----------------------
ids_arg = ",".join(map(str, PROMPT))
for tag, c, seed in (("untied", c1, 31), ("tied", c2, 32)):
    gd = os.path.join(H.w, "gen_" + tag)
    G.save_hf(G.init_model(c, seed=seed, std=0.3), gd)
    m = G.load_hf(gd)
    ref, gap = G.greedy(m, PROMPT, NEW)
    log = os.path.join(H.w, f"gen_{tag}.log")
    r = subprocess.run([H.exe, "generate", "--model", gd, "--prompt-ids", ids_arg, "--temperature", "0",
                        "--max-new-tokens", str(NEW), "--print-ids"], capture_output=True, text=True, cwd=H.w)
    with open(log, "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        ck(f"[{tag}] greedy generate", False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        continue
    got = [int(x) for x in r.stdout.strip().split(",")]
    first = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), None)
    ck(f"[{tag}] greedy: shardlm generate {NEW} tokens = PyTorch full recompute (smallest top-2 logit gap "
       f"{gap:.2e})", got == ref, "identical" if got == ref else f"first difference at token {first}: {got} vs {ref}")
    # not vacuous: each multiplier that can change an argmax does (logits_scaling cannot), and the rope scaling
    changed = [k for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier")
               if G.greedy(G.load_hf(gd, ignore=(k,)), PROMPT, NEW)[0] != ref]
    if c.rope_scaling:
        changed += ["rope_scaling"] if G.greedy(G.load_hf(gd, plain_rope=True), PROMPT, NEW)[0] != ref else []
    want = 4 if c.rope_scaling else 3
    ck(f"[{tag}] greedy not vacuous: without each of embedding / residual / attention multiplier"
       f"{' and rope_scaling' if c.rope_scaling else ''} the reference's continuation differs",
       len(changed) == want, f"differs without {changed}")

H.finish()
