"""Qwen2 vs PyTorch: `shardlm dump` and `shardlm train` of a tiny Qwen2
(Qwen2ForCausalLM: Llama with q/k/v biases; models/llama.c with
cfg.qkv_bias) against llama_ref.py (make_config(family="qwen2")), whose
biases are initialised N(0, std) so that they matter.

Checks (one line each, then "N passed, M failed"):
  - dump: logits, loss and every gradient (the three bias gradients
    included) within the dump bound 2e-5 relative; checkpointing
    none/selective/full dumps bit-identical;
  - 10 AdamW steps (engine_checks.py's schedule: biases not decayed, as the
    reference's dim < 2 group): per-step loss, lr, grad_norm, final weights;
  - negative control: the same weights with the biases zeroed, dumped by
    the engine, miss the reference by more than 10x the bound;
  - per-layer windows (transformers' Qwen2Config: use_sliding_window keeps
    sliding_window, layers i >= max_window_layers slide unless layer_types
    says otherwise): window 5 < T = 16 on layer 1 (max_window_layers 1), and
    on layer 0 only (layer_types, against max_window_layers 2): dumps vs the
    reference, 10 AdamW steps and the saved config's layer_types for the
    first; negative control per case: the engine without the window
    (use_sliding_window false) misses the windowed reference by > 10x the
    bound.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402


WINDOW = 5


def engine_miss(ck, exe, w, data, mdir, ref, label, **edits):
    """The engine's dump of mdir's weights under a config with edits must
    miss the reference dump ref by more than 10x the bound."""
    off = common.model_variant(mdir, os.path.join(w, "model_" + label.split()[-1]), **edits)
    out = os.path.join(w, f"dump_{label.split()[-1]}.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(off, data, out, "none"), out + ".log")
    err = E.rel_err(common.st_read(out)["logits"].reshape(ref["logits"].shape), ref["logits"]) if ok else 0.0
    ck(f"negative control: the engine {label} misses the reference", ok and err > 10 * E.DUMP_TOL,
       f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})" if ok else msg)


def windowed(ck, exe, w, data, stream):
    for tag, extra, want in (("max_window_layers", dict(max_window_layers=1), [0, WINDOW]),
                             ("layer_types", dict(max_window_layers=2,
                                                  layer_types=["sliding_attention", "full_attention"]), [WINDOW, 0])):
        wd = os.path.join(w, "win_" + tag)
        mdir = os.path.join(wd, "model")
        cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=E.VOCAB, family="qwen2",
                            use_sliding_window=True, sliding_window=WINDOW, use_mrope=False, **extra)
        L.save_hf(L.init_model(cfg, seed=22, std=0.08, norm_jitter=0.1), mdir)
        ref_m = L.load_hf(mdir)
        ck(f"[{tag}] reference: layer windows {want}", ref_m.config.layer_windows == want,
           str(ref_m.config.layer_windows))
        ref = L.dump(ref_m, stream, E.B, E.T)
        names = [n for n, _ in ref_m.named_parameters()]
        E.dump_modes(ck, exe, wd, mdir, data, ref, names, f"[{tag}] dump vs PyTorch: logits, loss, all grads (2e-5 rel)",
                     tag)
        if tag == "max_window_layers":
            save = E.train_vs_ref(ck, exe, wd, mdir, data, stream, L)  # 10 AdamW steps
            c = common.config_read(save) if save else {}
            ck(f"[{tag}] saved config: use_sliding_window, sliding_window {WINDOW}, layer_types",
               (c.get("use_sliding_window"), c.get("sliding_window"), c.get("layer_types")) ==
               (True, WINDOW, ["full_attention", "sliding_attention"]), str({k: c.get(k) for k in (
                   "use_sliding_window", "sliding_window", "max_window_layers", "layer_types")}))
        engine_miss(ck, exe, wd, data, mdir, ref, f"[{tag}] without the window", use_sliding_window=False,
                    layer_types=None)


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    cfg = L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=E.VOCAB,
                        family="qwen2", use_sliding_window=False, use_mrope=False, max_window_layers=2)
    mdir = os.path.join(w, "model_qwen2")
    L.save_hf(L.init_model(cfg, seed=21, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    nb = sum(n.endswith("_proj.bias") for n in names)
    ck("reference has the q/k/v biases (2 layers x 3)", nb == 6 and cfg.qkv_bias and not cfg.o_bias, f"{nb} biases")
    ref = L.dump(ref_m, stream, E.B, E.T)
    E.dump_modes(ck, exe, w, mdir, data, ref, names,
                 "dump vs PyTorch: logits, loss, all grads incl. q/k/v biases (2e-5 rel)")
    save = E.train_vs_ref(ck, exe, w, mdir, data, stream, L)  # 10 AdamW steps
    if save:
        c = common.config_read(save)
        ck("saved config is Qwen2", c.get("architectures") == ["Qwen2ForCausalLM"] and c.get("model_type") == "qwen2",
           str(c.get("architectures")))

    # negative control: the biases zeroed in the engine's input
    off = os.path.join(w, "model_nobias")
    os.makedirs(off, exist_ok=True)
    common.config_write(off, common.config_read(mdir))
    t = common.st_read(os.path.join(mdir, "model.safetensors"))
    t = {k: (np.zeros_like(v) if k.endswith("_proj.bias") else v) for k, v in t.items()}
    common.st_write(os.path.join(off, "model.safetensors"), t, metadata={"format": "pt"})
    out2 = os.path.join(w, "dump_nobias.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(off, data, out2, "none"), out2 + ".log")
    eng = common.st_read(out2) if ok else None
    err = E.rel_err(eng["logits"].reshape(ref["logits"].shape), ref["logits"]) if ok else 0.0
    ck("negative control: the engine with the biases zeroed misses the reference", ok and err > 10 * E.DUMP_TOL,
       f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})" if ok else msg)
    windowed(ck, exe, w, data, stream)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
