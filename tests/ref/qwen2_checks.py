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
    the engine, miss the reference by more than 10x the bound.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402


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
    dumps = {}
    for mode in E.CKPT:
        out = os.path.join(w, f"dump_{mode}.safetensors")
        ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, mode), out + ".log")
        dumps[mode] = out if ok else None
        if not ok:
            ck(f"dump --activation-checkpoint {mode}", False, msg)
    if dumps["none"]:
        E.compare_dump(ck, "dump vs PyTorch: logits, loss, all grads incl. q/k/v biases (2e-5 rel)", dumps["none"],
                       ref, names)
    for mode in E.CKPT[1:]:
        if dumps["none"] and dumps[mode]:
            eq, d = E.tensors_bit_equal(dumps["none"], dumps[mode])
            ck(f"dump bit-identical none vs {mode}", eq, d)

    E.train_check(ck, exe, w, mdir, data, stream, "Qwen2ForCausalLM", "qwen2")  # 10 AdamW steps

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
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
