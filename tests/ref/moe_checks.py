"""Mixtral (mixture of experts) vs PyTorch: `shardlm dump` and `shardlm train`
of a tiny MixtralForCausalLM (models/llama.c with cfg.moe_experts; the sparse
MLP is models/llama_moe.c) against llama_ref.py's SparseMoeBlock, written
from transformers' MixtralSparseMoeBlock (fp32 softmax router, top-k, the k
weights renormalised, dropless).

Checks (one line each, then "N passed, M failed"):
  - dump: logits, loss and every gradient (router and every expert's) within
    the dump bound 2e-5 relative; checkpointing none/selective/full dumps
    bit-identical;
  - the routing exercises the experts unevenly, one expert idle in a layer
    (the zero-token group) where the reference says so;
  - 10 AdamW steps: per-step loss, lr, grad_norm, final weights (1e-4);
    the per-step tokens of each expert of each layer (metrics.jsonl
    moe_load) equal the reference's selections at every step;
  - the saved dir: Mixtral's config and tensor names; loading it back and
    saving again gives byte-identical files;
  - negative control: the reference without the renormalisation misses the
    engine by more than 10x the dump bound.
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


def moe_config():
    return L.make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=32, vocab=E.VOCAB,
                         family="mixtral", num_local_experts=E_EXPERTS, num_experts_per_tok=TOPK,
                         router_aux_loss_coef=0.02)


def loads(m):
    """(layers, E) tokens each expert received in the last forward."""
    return [np.bincount(layer.block_sparse_moe.selected.reshape(-1).numpy(), minlength=E_EXPERTS).tolist()
            for layer in m.model.layers]


def ref_train_loads(mdir, stream):
    """The reference's 10 steps, with each step's expert loads summed over its micro-batches."""
    m = L.load_hf(mdir)
    per_step = []
    orig = m.forward

    def fwd(*a, **k):
        out = orig(*a, **k)
        per_step.append(loads(m))
        return out
    m.forward = fwd
    rows = L.train(m, stream, E.STEPS, E.B, E.T, E.ACCUM, E.HP["lr"], E.HP["min_lr"], E.HP["warmup"],
                   E.HP["wd"], E.HP["b1"], E.HP["b2"], E.HP["eps"], E.HP["clip"])
    n = len(per_step) // E.STEPS  # forwards a step (1 when the reference runs the whole batch)
    steps = [np.sum(per_step[s * n:(s + 1) * n], axis=0).tolist() for s in range(E.STEPS)]
    return m, rows, steps


def main():
    ck, exe, w, data = E.start()
    stream = E.make_data(data)
    cfg = moe_config()
    mdir = os.path.join(w, "model_mixtral")
    L.save_hf(L.init_model(cfg, seed=31, std=0.08, norm_jitter=0.1), mdir)
    ref_m = L.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ref = L.dump(ref_m, stream, E.B, E.T)
    ld = loads(ref_m)
    ck("reference routing: uneven loads", all(max(r) > min(r) for r in ld), f"tokens per expert {ld}")
    dump0 = E.dump_modes(ck, exe, mdir, data, w, ref, names,
                         "dump vs PyTorch: logits, loss, all grads incl. router and experts (2e-5 rel)")

    # negative control: the reference without the renormalisation of the k weights
    for layer in ref_m.model.layers:
        layer.block_sparse_moe.norm = False
    ref_nonorm = L.dump(ref_m, stream, E.B, E.T)
    if dump0:
        eng = common.st_read(dump0)
        err = E.rel_err(eng["logits"].reshape(ref_nonorm["logits"].shape), ref_nonorm["logits"])
        ck("negative control: the reference without renormalisation misses the engine", err > 10 * E.DUMP_TOL,
           f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})")

    # 10 AdamW steps, the expert loads of every step
    ref_m, ref_rows, ref_loads = ref_train_loads(mdir, stream)
    met, save = os.path.join(w, "metrics.jsonl"), os.path.join(w, "saved")
    ok, msg = E.run_engine(exe, E.train_args(mdir, data, met, save, "none"), met + ".log")
    if ok:
        E.compare_training(ck, "[train]", met, save, ref_rows, ref_m)
        rows = [r for r in common.read_metrics(met) if "step" in r]
        eng_loads = [r.get("moe_load") for r in rows]
        first_bad = next((i + 1 for i, (a, b) in enumerate(zip(eng_loads, ref_loads)) if a != b), None)
        ck("[train] tokens per expert per layer equal the reference's selections at every step",
           len(eng_loads) == E.STEPS and first_bad is None,
           f"step 1 {eng_loads[0]}" if first_bad is None else
           f"step {first_bad}: engine {eng_loads[first_bad - 1]} ref {ref_loads[first_bad - 1]}")
        c = common.config_read(save)
        ck("saved config is Mixtral", c.get("architectures") == ["MixtralForCausalLM"]
           and c.get("num_local_experts") == E_EXPERTS and c.get("num_experts_per_tok") == TOPK, str(c))
        # save -> load -> save: byte-identical
        again = os.path.join(w, "saved_again")
        ok2, msg2 = E.run_engine(exe, ["train", "--model", save, "--data", data, "--steps", 0, "--micro-batch", E.B,
                                       "--seq-len", E.T, "--save", again], again + ".log")
        if ok2:
            same = all(open(os.path.join(save, f), "rb").read() == open(os.path.join(again, f), "rb").read()
                       for f in ("config.json", "model.safetensors"))
            ck("HF round trip: the saved Mixtral loaded and saved again is byte-identical", same, "")
        else:
            ck("HF round trip", False, msg2)
    else:
        ck("train", False, msg)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
