"""Gemma 2 vs PyTorch: `shardlm dump` and `shardlm train` of a tiny Gemma 2
(Gemma2ForCausalLM through models/llama.c's Gemma options) against
llama_ref.py (make_config(family="gemma2")): (1 + w) norms with
zero-initialised weights (jittered here so they matter), the four norms of
a layer, embeddings times sqrt(hidden), query_pre_attn_scalar, tanh-GELU
GeGLU, attention-logit and final-logit softcaps (small caps, so tanh bends
this tiny model's scores), a sliding window on the even layers, tied
embeddings.

Checks (one line each, then "N passed, M failed"):
  - dump: logits, loss and every gradient within the dump bound 2e-5
    relative; checkpointing none/selective/full dumps bit-identical;
  - 10 AdamW steps (engine_checks.py's schedule): per-step loss, lr,
    grad_norm, final weights; the saved config is Gemma 2;
  - negative controls, each > 10x the bound from the reference: the engine
    without the attention softcap, without the final softcap, without the
    window (config edits); the engine without the embedding scale, without
    the post-attention / post-feedforward norms, with w instead of 1 + w
    (the test hook SL_TEST_GEMMA_OFF=embed_scale|post_norms|plus_one, one
    dump each against the same reference dump), each of which equals the
    reference without that feature (logits, loss); a bad value of the hook
    exits 2 naming it.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402

WINDOW = 5


def gemma_cfg(**over):
    d = dict(hidden=64, layers=3, heads=4, kv_heads=2, intermediate=96, vocab=E.VOCAB, tied=True, head_dim=16,
             family="gemma2", sliding_window=WINDOW, attn_logit_softcapping=0.5, final_logit_softcapping=0.8,
             query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", eps=1e-6)
    d.update(over)
    return L.make_config(**d)


def engine_dump(ck, exe, w, mdir, data, tag, mode="none", env=None):
    out = os.path.join(w, f"dump_{tag}_{mode}.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, mode), out + ".log", env=env)
    if not ok:
        ck(f"dump {tag} --activation-checkpoint {mode}", False, msg)
    return out if ok else None


def dump_checks(ck, exe, w, mdir, data, tag, ref, names):
    """The engine's dumps under each checkpointing mode: the first against
    the reference dump ref, the others bit-identical to it."""
    dumps = {mode: engine_dump(ck, exe, w, mdir, data, tag, mode) for mode in E.CKPT}
    if dumps["none"]:
        E.compare_dump(ck, "dump vs PyTorch: logits, loss, every grad (2e-5 rel)", dumps["none"], ref, names)
    for mode in E.CKPT[1:]:
        if dumps["none"] and dumps[mode]:
            eq, d = E.tensors_bit_equal(dumps["none"], dumps[mode])
            ck(f"dump bit-identical none vs {mode}", eq, d)
    return dumps


def miss(ck, label, eng_logits, ref_logits):
    err = E.rel_err(eng_logits.reshape(ref_logits.shape), ref_logits)
    ck(f"negative control: {label}", err > 10 * E.DUMP_TOL, f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})")


def ref_without(mdir, off):
    """The reference on mdir's weights without one feature (the hook's)."""
    r = L.load_hf(mdir)
    r.config.no_embed_scale = off == "embed_scale"
    for layer in r.model.layers:
        if off == "post_norms":
            layer.post_attention_layernorm = torch.nn.Identity()
            layer.post_feedforward_layernorm = torch.nn.Identity()
    for mod in r.modules():
        if off == "plus_one" and isinstance(mod, L.RMSNorm):
            mod.plus_one = False
    return r


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    cfg = gemma_cfg()
    mdir = os.path.join(w, "model_gemma2")
    L.save_hf(L.init_model(cfg, seed=23, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ck("reference: 4 norms a layer, a window on layers 0 and 2",
       sum(n.endswith("layernorm.weight") for n in names) == 12 and cfg.layer_windows == [WINDOW, 0, WINDOW],
       str(cfg.layer_windows))
    ref = L.dump(ref_m, stream, E.B, E.T)
    dump_checks(ck, exe, w, mdir, data, "gemma2", ref, names)

    c = E.train_check(ck, exe, w, mdir, data, stream, "Gemma2ForCausalLM", "gemma2")  # 10 AdamW steps
    if c is not None:
        ck("saved config keeps the Gemma 2 fields",
           (c.get("attn_logit_softcapping"), c.get("final_logit_softcapping"), c.get("query_pre_attn_scalar"),
            c.get("sliding_window"), c.get("hidden_activation")) == (0.5, 0.8, 24, WINDOW, "gelu_pytorch_tanh"),
           str(c))

    # negative controls: the engine without a feature (config edits) ...
    for tag, edits in (("without the attention softcap", dict(attn_logit_softcapping=None)),
                       ("without the final-logit softcap", dict(final_logit_softcapping=None)),
                       ("without the window", dict(sliding_window=4 * E.T))):
        vdir = common.model_variant(mdir, os.path.join(w, "ctl_" + tag.split()[-2]), **edits)
        out = engine_dump(ck, exe, w, vdir, data, tag.split()[-2])
        if out:
            miss(ck, f"the engine {tag} misses the reference", common.st_read(out)["logits"], ref["logits"])
    # ... and without the embedding scale, the sandwich norms, the 1 + w (the engine's test hook)
    for off, tag in (("embed_scale", "embedding scale"), ("post_norms", "post norms"), ("plus_one", "1 + w")):
        out = engine_dump(ck, exe, w, mdir, data, "off_" + off, env={"SL_TEST_GEMMA_OFF": off})
        if out:
            eng = common.st_read(out)
            miss(ck, f"the engine without the {tag} (SL_TEST_GEMMA_OFF={off}) misses the reference",
                 eng["logits"], ref["logits"])
            # the hook removes that feature and nothing else: the reference without it agrees
            r = L.dump(ref_without(mdir, off), stream, E.B, E.T)
            err = max(E.rel_err(eng["logits"].reshape(r["logits"].shape), r["logits"]),
                      E.rel_err(eng["loss"].reshape(r["loss"].shape), r["loss"]))
            ck(f"SL_TEST_GEMMA_OFF={off} = the reference without the {tag}: logits, loss (2e-5 rel)",
               err <= E.DUMP_TOL, f"rel {err:.2e}")
    out = os.path.join(w, "dump_off_bad.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, "none"), out + ".log", env={"SL_TEST_GEMMA_OFF": "x"})
    log = open(out + ".log").read()
    ck("SL_TEST_GEMMA_OFF=x: exit 2 naming the variable", "exit 2:" in msg and "SL_TEST_GEMMA_OFF = 'x'" in log,
       msg[:300])
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
