"""Mixtral and Qwen3-MoE (mixtures of experts) vs PyTorch: `shardlm dump` and
`shardlm train` of tiny MixtralForCausalLM and Qwen3MoeForCausalLM models
(models/llama.c with cfg.moe_experts; the sparse MLP is models/llama_moe.c)
against llama_ref.py's SparseMoeBlock, written from transformers'
MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock (fp32 softmax router, top-k,
the k weights renormalised always (Mixtral) or with norm_topk_prob
(Qwen3-MoE: true and false), dropless).

Checks for each case (one line each, then "N passed, M failed"):
  - the reference routes unevenly; dump: logits, loss and every gradient
    (router and every expert's) within the dump bound 2e-5 relative;
    checkpointing none/selective/full dumps bit-identical;
  - negative control: the reference with the renormalisation switched
    (off for Mixtral and norm_topk_prob true, on for false) misses the
    engine by more than 10x the dump bound;
  - 10 AdamW steps: per-step loss, lr, grad_norm, final weights (1e-4);
    the per-step tokens of each expert of each layer (metrics.jsonl
    moe_load) equal the reference's selections at every step;
  - the saved dir: the architecture and its MoE fields; loading it back and
    saving again gives byte-identical files.
(An expert with no token: tests/unit/kernels/test_kernels.c.)
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import llama_ref as L  # noqa: E402

E_EXPERTS, TOPK = 4, 2
# (tag, family, config fields): Mixtral renormalises always; Qwen3-MoE (q/k norms, head_dim 12 != 64/4) with
# norm_topk_prob true and false
CASES = (("mixtral", "mixtral", dict(num_local_experts=E_EXPERTS, router_aux_loss_coef=0.02)),
         ("qwen3_moe", "qwen3_moe", dict(num_experts=E_EXPERTS, moe_intermediate_size=24, norm_topk_prob=True,
                                         head_dim=12)),
         ("qwen3_moe_nonorm", "qwen3_moe", dict(num_experts=E_EXPERTS, moe_intermediate_size=24,
                                                norm_topk_prob=False, head_dim=12)),
         # the load-balancing loss (output_router_logits true; coefficient 0.5 so that it moves the run)
         ("mixtral_aux", "mixtral", dict(num_local_experts=E_EXPERTS, router_aux_loss_coef=0.5,
                                         output_router_logits=True)))


def moe_config(family, extra):
    return L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=32, vocab=E.VOCAB,
                         family=family, num_experts_per_tok=TOPK, **extra)


def moe_block(layer):
    return getattr(layer, "block_sparse_moe", None) or layer.mlp


def loads(m):
    """(layers, E) tokens each expert received in the last forward."""
    return [np.bincount(moe_block(layer).selected.reshape(-1).numpy(), minlength=E_EXPERTS).tolist()
            for layer in m.model.layers]


def ref_train_loads(mdir, stream, aux=None):
    """The reference's 10 steps, with each step's expert loads summed over its micro-batches
    (with the aux loss: per micro-batch, as the engine computes it)."""
    m = L.load_hf(mdir)
    per_step = []
    orig = m.forward

    def fwd(*a, **k):
        out = orig(*a, **k)
        per_step.append(loads(m))
        return out
    m.forward = fwd
    rows = L.train(m, stream, E.STEPS, E.B, E.T, E.ACCUM, E.HP["lr"], E.HP["min_lr"], E.HP["warmup"],
                   E.HP["wd"], E.HP["b1"], E.HP["b2"], E.HP["eps"], E.HP["clip"], whole_batch=aux is None, aux=aux)
    n = len(per_step) // E.STEPS  # forwards a step (1 when the reference runs the whole batch)
    steps = [np.sum(per_step[s * n:(s + 1) * n], axis=0).tolist() for s in range(E.STEPS)]
    return m, rows, steps


def run_case(ck, exe, root, data, stream, tag, family, extra):
    w = os.path.join(root, tag)
    os.makedirs(w, exist_ok=True)
    cfg = moe_config(family, extra)
    mdir = os.path.join(w, "model")
    L.save_hf(L.init_model(cfg, seed=31, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    aux = L.moe_aux_loss if cfg.output_router_logits else None
    ref = L.dump(ref_m, stream, E.B, E.T, aux)
    ld = loads(ref_m)
    ck(f"[{tag}] reference routing: uneven loads", all(max(r) > min(r) for r in ld), f"tokens per expert {ld}")
    dump0 = E.dump_modes(ck, exe, w, mdir, data, ref, names,
                         f"[{tag}] dump vs PyTorch: logits, loss, all grads incl. router and experts (2e-5 rel)")["none"]
    # negative control: the reference with the renormalisation of the k weights switched
    norm = cfg.norm_topk_prob
    for layer in ref_m.model.layers:
        moe_block(layer).norm = not norm
    ref_sw = L.dump(ref_m, stream, E.B, E.T, aux)
    if dump0:
        eng = common.st_read(dump0)
        err = E.rel_err(eng["logits"].reshape(ref_sw["logits"].shape), ref_sw["logits"])
        ck(f"[{tag}] negative control: the reference with renormalisation {'off' if norm else 'on'} misses the "
           "engine", err > 10 * E.DUMP_TOL, f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})")
    # 10 AdamW steps, the expert loads of every step
    if aux:  # negative controls: the aux loss off, its coefficient doubled
        for layer in ref_m.model.layers:
            moe_block(layer).norm = norm
        for name, f in (("off", None), ("coefficient doubled", lambda mm: 2 * L.moe_aux_loss(mm))):
            r = L.dump(ref_m, stream, E.B, E.T, f)
            if dump0:
                err = max(E.rel_err(eng["loss"], r["loss"]),
                          max(E.rel_err(eng[k].reshape(r[k].shape), r[k]) for k in r if ".gate." in k))
                ck(f"[{tag}] negative control: the reference with the aux loss {name} misses the engine "
                   "(loss, router grads)", err > 10 * E.DUMP_TOL, f"worst rel {err:.2e} (bound {E.DUMP_TOL:g})")
    ref_m, ref_rows, ref_loads = ref_train_loads(mdir, stream, aux)
    met, save = os.path.join(w, "metrics.jsonl"), os.path.join(w, "saved")
    ok, msg = E.run_engine(exe, E.train_args(mdir, data, met, save, "none"), met + ".log")
    if not ok:
        return ck(f"[{tag}] train", False, msg)
    E.compare_training(ck, f"[{tag}] train", met, save, ref_rows, ref_m)
    rows = [r for r in common.read_metrics(met) if "step" in r]
    eng_loads = [r.get("moe_load") for r in rows]
    first_bad = next((i + 1 for i, (a, b) in enumerate(zip(eng_loads, ref_loads)) if a != b), None)
    ck(f"[{tag}] tokens per expert per layer equal the reference's selections at every step",
       len(eng_loads) == E.STEPS and first_bad is None,
       f"step 1 {eng_loads[0]}" if first_bad is None else
       f"step {first_bad}: engine {eng_loads[first_bad - 1]} ref {ref_loads[first_bad - 1]}")
    c, want = common.config_read(save), cfg.to_dict()
    keys = ("architectures", "num_experts_per_tok", "num_local_experts", "num_experts", "norm_topk_prob",
            "moe_intermediate_size")
    diff = [k for k in keys if c.get(k) != want.get(k)]
    ck(f"[{tag}] saved config: {want['architectures'][0]} with its MoE fields", not diff, f"differ: {diff}")
    # save -> load -> save: byte-identical
    again = os.path.join(w, "saved_again")
    ok2, msg2 = E.run_engine(exe, ["train", "--model", save, "--data", data, "--steps", 0, "--micro-batch", E.B,
                                   "--seq-len", E.T, "--save", again], again + ".log")
    same = ok2 and all(open(os.path.join(save, f), "rb").read() == open(os.path.join(again, f), "rb").read()
                       for f in ("config.json", "model.safetensors"))
    return ck(f"[{tag}] HF round trip: the saved model loaded and saved again is byte-identical", same,
              "" if ok2 else msg2)


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    for tag, family, extra in CASES:
        run_case(ck, exe, w, data, stream, tag, family, extra)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
