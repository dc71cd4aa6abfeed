"""rope_scaling vs PyTorch: `shardlm dump` (logits, loss, every gradient, 2e-5
max relative, the dump bound of docs/CONTRIBUTING.md) of tiny Llamas with
rope_scaling linear, llama3 and yarn (with and without an attention factor) against llama_ref.py, whose
rope_inv_freq is written from transformers' modeling_rope_utils.py.

The shapes make every band of each rule count: head_dim 16 (8 pairs,
wavelengths 6.3 .. 19869 at theta 10000) and seq 64. llama3 with
original_max_position_embeddings 64 (factor 8, low 1, high 4: thresholds 16
and 64) keeps pair 0, blends pairs 1-2 and divides pairs 3-7; yarn with
max_position_embeddings 512 (correction range 0..4) keeps pair 0, blends
1-3 and divides 4-7. Negative control: the llama3 model dumped by the
engine with its rope_scaling removed must miss the reference by more than
the bound.
"""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402

T, B = 64, 3

BASE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=E.VOCAB, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False, max_position_embeddings=512)
CASES = [
    ("linear", {"rope_type": "linear", "factor": 4.0}),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}),
    ("linear-old-spelling", {"type": "linear", "factor": 2.0}),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.0}),
    # the default attention factor 0.1 ln 4 + 1 = 1.1386: q.k times its square
    ("yarn-factor", {"rope_type": "yarn", "factor": 4.0}),
    # DeepSeek-V3's form: transformers takes factor = max / original (512 / 128 = 4, not the
    # file's 40) and the correction range from the original; mscale = mscale_all_dim: factor 1
    ("yarn-original", {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 128, "beta_fast": 16, "beta_slow": 2}),
]


def dump_args(model, data, out):
    return ["dump", "--model", model, "--data", data, "--data-order", "sequential",
            "--micro-batch", B, "--seq-len", T, "--out", out]


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    for k, (tag, rs) in enumerate(CASES):
        d = dict(BASE, rope_scaling=rs)
        cfg = L.LlamaConfig(d)
        inv, af = L.rope_inv_freq(cfg)
        plain, _ = L.rope_inv_freq(L.LlamaConfig(BASE))
        kept = int((inv == plain).sum())
        ck(f"[{tag}] reference table differs from plain RoPE", kept < len(inv) and (af == 1.0) == (tag != "yarn-factor"),
           f"{kept} of {len(inv)} pairs kept, attention factor {af}")
        mdir = os.path.join(w, "model_" + tag)
        L.save_hf(L.init_model(cfg, seed=11 + k, std=0.08, norm_jitter=0.1), mdir)
        ref_m = L.load_hf(mdir)
        names = [n for n, _ in ref_m.named_parameters()]
        ref = L.dump(ref_m, stream, B, T)
        out = os.path.join(w, f"dump_{tag}.safetensors")
        ok, msg = E.run_engine(exe, dump_args(mdir, data, out), out + ".log")
        if not ok:
            ck(f"[{tag}] dump", False, msg)
            continue
        E.compare_dump(ck, f"[{tag}] dump vs PyTorch: logits, loss, all grads (2e-5 rel)", out, ref, names)
        if tag == "yarn-factor":
            # negative control: the same model with attention_factor 1 in the engine misses the reference
            off = os.path.join(w, "model_yarn_af1")
            os.makedirs(off, exist_ok=True)
            c2 = copy.deepcopy(common.config_read(mdir))
            c2["rope_scaling"] = dict(c2["rope_scaling"], attention_factor=1.0)
            common.config_write(off, c2)
            os.symlink(os.path.join(mdir, "model.safetensors"), os.path.join(off, "model.safetensors"))
            out2 = os.path.join(w, "dump_yarn_af1.safetensors")
            ok, msg = E.run_engine(exe, dump_args(off, data, out2), out2 + ".log")
            eng = common.st_read(out2) if ok else None
            err = E.rel_err(eng["logits"].reshape(ref["logits"].shape), ref["logits"]) if ok else 0.0
            ck("[yarn-factor] negative control: the engine without the attention factor misses the reference",
               ok and err > 10 * E.DUMP_TOL, f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})" if ok else msg)
        if tag == "llama3":
            # negative control: the engine without the scaling, against the scaled reference
            off = os.path.join(w, "model_llama3_off")
            os.makedirs(off, exist_ok=True)
            c2 = copy.deepcopy(common.config_read(mdir))
            c2["rope_scaling"] = None
            common.config_write(off, c2)
            os.symlink(os.path.join(mdir, "model.safetensors"), os.path.join(off, "model.safetensors"))
            out2 = os.path.join(w, "dump_llama3_off.safetensors")
            ok, msg = E.run_engine(exe, dump_args(off, data, out2), out2 + ".log")
            if not ok:
                ck("[llama3] negative control dump", False, msg)
            else:
                eng = common.st_read(out2)
                err = E.rel_err(eng["logits"].reshape(ref["logits"].shape), ref["logits"])
                ck("[llama3] negative control: the engine without rope_scaling misses the reference",
                   err > 10 * E.DUMP_TOL, f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})")
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
