"""Falcon-Mamba vs PyTorch: `shardlm dump` and `shardlm train` of a tiny
FalconMambaForCausalLM (models/mamba.c with cfg.mixer_rms: the Mamba-1 mixer
with a weightless RMSNorm of dt, B and C after the x_proj split) against
mamba_ref.py (make_config(falcon=True), written from transformers'
modeling_falcon_mamba.py FalconMambaMixer.slow_forward).

Checks (one line each, then "N passed, M failed"):
  - the oracle itself (mamba_ref.falcon_selfcheck): float64 gradcheck of
    every parameter through the norms, and the norms change the logits;
  - dump: logits, loss and every gradient within the dump bound 2e-5
    relative; checkpointing none/selective/full dumps bit-identical;
  - 10 AdamW steps (engine_checks.py's schedule): per-step loss (1e-4), lr,
    grad_norm, final weights (1e-4); the saved config.json is
    FalconMambaForCausalLM / falcon_mamba with mixer_rms_eps kept;
  - convert HF -> ckpt (2 ranks, ZeRO-3) -> HF: tensors byte-identical and
    the config still Falcon-Mamba;
  - negative control: the same weights loaded as a plain Mamba
    (MambaForCausalLM: no dt/B/C norms) miss the reference by more than 10x
    the bound.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import engine_checks as E  # noqa: E402
import mamba_ref as M  # noqa: E402

E.L = M  # compare_training reloads the saved dir with E.L.load_hf


def falcon_config_ok(d, eps):
    c = common.config_read(d)
    ok = (c.get("architectures") == ["FalconMambaForCausalLM"] and c.get("model_type") == "falcon_mamba"
          and c.get("mixer_rms_eps") == eps)
    return ok, f"{c.get('architectures')} {c.get('model_type')} mixer_rms_eps {c.get('mixer_rms_eps')}"


def main():
    ck, exe, w, data = E.start()
    ck("oracle: float64 gradcheck through the dt/B/C norms, the norms change logits", *M.falcon_selfcheck())
    stream = E.make_data(data)
    eps = 1e-5  # not the default 1e-6: the engine must read it
    cfg = M.make_config(hidden=32, layers=2, state=8, expand=2, conv=4, dt_rank=4, vocab=E.VOCAB, tied=False,
                        falcon=True, mixer_rms_eps=eps)
    mdir = os.path.join(w, "model_falcon")
    M.save_hf(M.init_model(cfg, seed=31, std=0.1, jitter=0.2), mdir)
    ref_m = M.load_hf(mdir)
    names = [n for n, _ in ref_m.named_parameters()]
    ck("reference is Falcon-Mamba (config round trip)", ref_m.config.falcon and ref_m.config.mixer_rms_eps == eps)
    ref = M.dump(ref_m, stream, E.B, E.T)
    E.dump_modes(ck, exe, w, mdir, data, ref, names, "dump vs PyTorch: logits, loss, all grads (2e-5 rel)")
    save = E.train_vs_ref(ck, exe, w, mdir, data, stream, M)  # 10 AdamW steps
    if save:
        ck("saved config is Falcon-Mamba", *falcon_config_ok(save, eps))

    # convert HF -> ckpt -> HF
    cdir, hdir = os.path.join(w, "ckpt"), os.path.join(w, "hf2")
    if (E.run_engine(exe, ["convert", "--from-hf", mdir, "--to-ckpt", cdir, "--world-size", 2, "--zero", 3],
                     os.path.join(w, "cv1.log"))[0] and
            E.run_engine(exe, ["convert", "--from-ckpt", cdir, "--model-config", mdir, "--to-hf", hdir],
                         os.path.join(w, "cv2.log"))[0]):
        eq, d = E.tensors_bit_equal(os.path.join(mdir, "model.safetensors"), os.path.join(hdir, "model.safetensors"))
        ck("convert HF -> ckpt (2 ranks, ZeRO-3) -> HF: tensors byte-identical", eq, d)
        ck("convert --to-hf config is Falcon-Mamba", *falcon_config_ok(hdir, eps))
    else:
        ck("convert HF -> ckpt -> HF", False, "a convert failed (logs in the work dir)")

    # negative control: the dt/B/C norms off (the same weights as a plain Mamba)
    off = os.path.join(w, "model_plain")
    os.makedirs(off, exist_ok=True)
    c = common.config_read(mdir)
    c.update(architectures=["MambaForCausalLM"], model_type="mamba")
    c.pop("mixer_rms_eps")
    common.config_write(off, c)
    os.symlink(os.path.join(mdir, "model.safetensors"), os.path.join(off, "model.safetensors"))
    out2 = os.path.join(w, "dump_plain.safetensors")
    ok, msg = E.run_engine(exe, E.dump_args(off, data, out2, "none"), out2 + ".log")
    eng = common.st_read(out2) if ok else None
    err = E.rel_err(eng["logits"].reshape(ref["logits"].shape), ref["logits"]) if ok else 0.0
    ck("negative control: the engine without the dt/B/C norms misses the reference",
       ok and err > 10 * E.DUMP_TOL, f"logits rel {err:.2e} (bound {E.DUMP_TOL:g})" if ok else msg)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
