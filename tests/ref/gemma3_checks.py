"""Gemma 3 text vs PyTorch: `shardlm dump` and `shardlm train` of a tiny
Gemma 3 (Gemma3ForCausalLM through models/llama.c's Gemma options) against
llama_ref.py (make_config(family="gemma3_text"), written from transformers'
modeling_gemma3.py): per-head q/k RMSNorm with (1 + w) weights, the four
(1 + w) norms of a layer (all zero-initialised, jittered here so they
matter), embeddings times sqrt(hidden), query_pre_attn_scalar, tanh-GELU
GeGLU, no softcaps, sliding_window_pattern 3 (layers 0, 1 sliding, layer 2
global), the sliding layers' RoPE on rope_local_base_freq, the global one on
rope_theta with a linear rope_scaling, tied embeddings.

Checks (one line each, then "N passed, M failed"):
  - dump: logits, loss and every gradient within the dump bound 2e-5
    relative; checkpointing none/selective/full dumps bit-identical;
  - 10 AdamW steps (engine_checks.py's schedule): per-step loss, lr,
    grad_norm, final weights; the saved config is Gemma 3 with its fields;
  - negative controls, each > 10x the bound from the reference: the engine
    with the local RoPE base equal to rope_theta, with sliding_window_pattern
    2, without rope_scaling (config edits); the reference without the q/k
    norms, with w instead of 1 + w in the q/k norms (reference edits: the
    engine has no switch for those).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import gemma2_checks as G2  # noqa: E402
import llama_ref as L  # noqa: E402

WINDOW = 5


def gemma3_cfg(**over):
    d = dict(hidden=64, layers=3, heads=4, kv_heads=2, intermediate=96, vocab=E.VOCAB, tied=True, head_dim=16,
             family="gemma3_text", sliding_window=WINDOW, sliding_window_pattern=3, rope_local_base_freq=100.0,
             theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0}, attn_logit_softcapping=None,
             final_logit_softcapping=None, query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", eps=1e-6)
    d.update(over)
    return L.make_config(**d)


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    cfg = gemma3_cfg()
    mdir = os.path.join(w, "model_gemma3")
    L.save_hf(L.init_model(cfg, seed=29, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ck("reference: 4 norms and q/k norms a layer, windows [5, 5, 0], local RoPE on layers 0, 1",
       sum(n.endswith("layernorm.weight") for n in names) == 12 and sum(n.endswith("_norm.weight") for n in names) == 6
       and cfg.layer_windows == [WINDOW, WINDOW, 0] and cfg.layer_local == [True, True, False],
       f"{cfg.layer_windows} {cfg.layer_local}")
    ref = L.dump(ref_m, stream, E.B, E.T)
    dumps = G2.dump_checks(ck, exe, w, mdir, data, "gemma3", ref, names)

    c = E.train_check(ck, exe, w, mdir, data, stream, "Gemma3ForCausalLM", "gemma3_text")  # 10 AdamW steps
    if c is not None:
        got = (c.get("sliding_window_pattern"), c.get("rope_local_base_freq"), c.get("sliding_window"),
               c.get("query_pre_attn_scalar"), c.get("attn_logit_softcapping"), c.get("final_logit_softcapping"),
               (c.get("rope_scaling") or {}).get("factor"))
        ck("saved config keeps the Gemma 3 fields", got == (3, 100.0, WINDOW, 24, None, None, 4.0), str(got))

    # negative controls: the engine without a feature (config edits) ...
    for tag, edits in (("with the local RoPE base = rope_theta", dict(rope_local_base_freq=10000.0)),
                       ("with sliding_window_pattern 2", dict(sliding_window_pattern=2)),
                       ("without rope_scaling", dict(rope_scaling=None))):
        key = tag.split()[-1].replace("=", "").replace("_", "") or "x"
        vdir = common.model_variant(mdir, os.path.join(w, "ctl_" + key), **edits)
        out = G2.engine_dump(ck, exe, w, vdir, data, "ctl_" + key)
        if out:
            G2.miss(ck, f"the engine {tag} misses the reference", common.st_read(out)["logits"], ref["logits"])
    # ... and the reference without one (the engine has no switch for these)
    eng = common.st_read(dumps["none"])["logits"] if dumps["none"] else None
    for tag in ("q/k norms", "1 + w in the q/k norms"):
        r = L.load_hf(mdir)
        for layer in r.model.layers:
            if tag == "q/k norms":
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()
            else:
                layer.self_attn.q_norm.plus_one = layer.self_attn.k_norm.plus_one = False
        if eng is not None:
            G2.miss(ck, f"the reference without the {tag} misses the engine", eng,
                    L.dump(r, stream, E.B, E.T)["logits"])
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
