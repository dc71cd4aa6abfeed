"""Qwen3 and Llama's attention_bias / mlp_bias vs PyTorch: `shardlm dump`,
`shardlm train` and `shardlm generate` of tiny models against llama_ref.py
(written from transformers' modeling_qwen3.py / modeling_llama.py).

Models (hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 24, not 64/4):
  qwen3     Qwen3ForCausalLM, tied embeddings (as 0.6B-4B), attention_bias
            false: per-head RMSNorm of q and k (q_norm, k_norm) before RoPE;
  qwen3 ab  the same with attention_bias true (q/k/v and o_proj biases);
  llama b   LlamaForCausalLM with attention_bias and mlp_bias (q/k/v/o and
            gate/up/down biases).
Biases are N(0, std) and norms 1 + N(0, 0.1), so that they matter.

Checks (one line each, then "N passed, M failed"):
  - dump: logits, loss and every gradient within the dump bound 2e-5 relative
    (engine_checks.DUMP_TOL); checkpointing none/selective/full bit-identical
    for qwen3;
  - 10 AdamW steps (engine_checks.py's schedule) for qwen3 and llama b:
    per-step loss, lr, grad_norm, final weights; the saved config.json;
  - greedy generation of 32 tokens = PyTorch's full recompute (qwen3,
    qwen3 ab, llama b);
  - negative controls (each misses the reference by more than 10x the bound):
    the q/k norms off (the same weights run as a Llama without them), o_proj's
    bias zeroed, down_proj's bias zeroed.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402
from generate_checks import NEW, PROMPT, greedy_ref  # noqa: E402
from eval_checks import run  # noqa: E402

SHAPE = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=24, intermediate=96, vocab=E.VOCAB)
CONFIGS = {
    "qwen3": dict(family="qwen3", tied=True, attention_bias=False, use_sliding_window=False, max_window_layers=2),
    "qwen3_ab": dict(family="qwen3", attention_bias=True, use_sliding_window=False, max_window_layers=2),
    "llama_b": dict(attention_bias=True, mlp_bias=True),
}


def model_dir(w, name, seed, std=0.08, tag=""):
    d = os.path.join(w, "model_" + name + tag)
    L.save_hf(L.init_model(L.make_config(**SHAPE, **CONFIGS[name]), seed=seed, std=std, norm_jitter=0.1), d)
    return d


def variant(src, dst, config=None, drop=(), zero=()):
    """A copy of model dir src: config.json updated by config, tensors whose
    name ends with a suffix in drop left out, in zero zeroed."""
    os.makedirs(dst, exist_ok=True)
    c = common.config_read(src)
    c.update(config or {})
    common.config_write(dst, c)
    t = common.st_read(os.path.join(src, "model.safetensors"))
    t = {k: (np.zeros_like(v) if k.endswith(zero) else v) for k, v in t.items() if not (drop and k.endswith(drop))}
    common.st_write(os.path.join(dst, "model.safetensors"), t, metadata={"format": "pt"})
    return dst


def dump_checks(ck, exe, w, data, stream, name, mdir, modes):
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ref = L.dump(ref_m, stream, E.B, E.T)
    dumps = {}
    for mode in modes:
        out = os.path.join(w, f"dump_{name.replace(' ', '_')}_{mode}.safetensors")
        ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, mode), out + ".log")
        dumps[mode] = out if ok else None
        if not ok:
            ck(f"{name}: dump --activation-checkpoint {mode}", False, msg)
    if dumps[modes[0]]:
        E.compare_dump(ck, f"{name}: dump vs PyTorch, logits, loss, all {len(names)} grads (2e-5 rel)",
                       dumps[modes[0]], ref, names)
    for mode in modes[1:]:
        if dumps[modes[0]] and dumps[mode]:
            eq, d = E.tensors_bit_equal(dumps[modes[0]], dumps[mode])
            ck(f"{name}: dump bit-identical none vs {mode}", eq, d)
    return names, ref


def train_checks(ck, exe, w, data, stream, name, mdir, want):
    ref_m = L.load_hf(mdir)
    ref_rows = L.train(ref_m, stream, E.STEPS, E.B, E.T, E.ACCUM, E.HP["lr"], E.HP["min_lr"], E.HP["warmup"],
                       E.HP["wd"], E.HP["b1"], E.HP["b2"], E.HP["eps"], E.HP["clip"])
    met, save = os.path.join(w, f"metrics_{name}.jsonl"), os.path.join(w, f"saved_{name}")
    ok, msg = E.run_engine(exe, E.train_args(mdir, data, met, save, "none"), met + ".log")
    if not ok:
        return ck(f"{name}: train", False, msg)
    E.compare_training(ck, f"[{name} train]", met, save, ref_rows, ref_m)
    c = common.config_read(save)
    got = {k: c.get(k) for k in want}
    return ck(f"{name}: saved config.json {want}", got == want, str(got))


def control(ck, exe, w, data, ref, label, mdir):
    out = os.path.join(w, f"dump_{os.path.basename(mdir)}.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(mdir, data, out, "none"), out + ".log")
    eng = common.st_read(out) if ok else None
    err = E.rel_err(eng["logits"].reshape(ref["logits"].shape), ref["logits"]) if ok else 0.0
    ck(f"negative control: {label} misses the reference", ok and err > 10 * E.DUMP_TOL,
       f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})" if ok else msg)


def generate_check(ck, exe, w, name, mdir):
    ref = greedy_ref(L.load_hf(mdir), PROMPT, NEW)
    rc, out, err = run([exe, "generate", "--model", mdir, "--prompt-ids", ",".join(map(str, PROMPT)),
                        "--temperature", 0, "--max-new-tokens", NEW, "--print-ids"], w)
    if rc != 0:
        return ck(f"{name}: greedy generate", False, f"exit {rc}: {err.strip()[-300:]}")
    got = [int(x) for x in out.strip().split(",")]
    first = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), None)
    return ck(f"{name}: greedy {NEW} tokens = PyTorch full recompute", got == ref,
              "identical" if got == ref else f"first difference at token {first}: {got} vs {ref}")


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    q3 = model_dir(w, "qwen3", 31)
    q3ab = model_dir(w, "qwen3_ab", 32)
    lb = model_dir(w, "llama_b", 33)
    names = [n for n, _ in L.load_hf(q3).named_parameters()]
    nn = sum(n.endswith(("q_norm.weight", "k_norm.weight")) for n in names)
    ck("qwen3 reference has q_norm / k_norm (2 layers x 2), no biases, tied",
       nn == 4 and not any(n.endswith(".bias") for n in names) and "lm_head.weight" not in names, f"{nn} norms")

    _, ref_q3 = dump_checks(ck, exe, w, data, stream, "qwen3", q3, E.CKPT)
    _, ref_q3ab = dump_checks(ck, exe, w, data, stream, "qwen3 ab", q3ab, ("none",))
    _, ref_lb = dump_checks(ck, exe, w, data, stream, "llama b", lb, ("none",))

    train_checks(ck, exe, w, data, stream, "qwen3", q3,
                 {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 24,
                  "attention_bias": False, "tie_word_embeddings": True})
    train_checks(ck, exe, w, data, stream, "llama b", lb,
                 {"architectures": ["LlamaForCausalLM"], "attention_bias": True, "mlp_bias": True})

    # greedy generation (std 0.3, as generate_checks.py, so that the continuation is not one token repeated)
    gq3, gq3ab, glb = (model_dir(w, n, s, std=0.3, tag="_gen") for n, s in
                       (("qwen3", 41), ("qwen3_ab", 42), ("llama_b", 43)))
    for name, d in (("qwen3", gq3), ("qwen3 ab", gq3ab), ("llama b", glb)):
        generate_check(ck, exe, w, name, d)
    plain = variant(gq3, os.path.join(w, "gen_qwen3_nonorm"), {"model_type": "llama",
                    "architectures": ["LlamaForCausalLM"]}, drop=("q_norm.weight", "k_norm.weight"))
    ck("qwen3: the q/k norms change the greedy continuation (check not vacuous)",
       greedy_ref(L.load_hf(plain), PROMPT, NEW) != greedy_ref(L.load_hf(gq3), PROMPT, NEW))

    # negative controls: the feature off in the engine's input
    control(ck, exe, w, data, ref_q3, "qwen3 with the q/k norms off (run as Llama without them)",
            variant(q3, os.path.join(w, "qwen3_nonorm"), {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
                    drop=("q_norm.weight", "k_norm.weight")))
    control(ck, exe, w, data, ref_q3ab, "qwen3 ab with o_proj's bias zeroed",
            variant(q3ab, os.path.join(w, "qwen3_ab_nobo"), zero=("o_proj.bias",)))
    control(ck, exe, w, data, ref_lb, "llama b with down_proj's bias zeroed",
            variant(lb, os.path.join(w, "llama_b_nobd"), zero=("down_proj.bias",)))
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
