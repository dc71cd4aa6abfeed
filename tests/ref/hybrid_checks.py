"""tests/ref/hybrid_checks.py — the pieces the hybrid Mamba-2 / attention reference tests share
(nemotron_h_checks.py, granite_h_checks.py): one Harness per run, over an oracle module R with
the nemotron_h_ref API (init_model, save_hf, load_hf(dir, dtype, **variant), dump, train,
loss_fn, ZERO_GRAD, its config class). Each method writes its check lines through EC.Checker."""
import argparse
import json
import os
import sys

import numpy as np
import torch

import common  # noqa: E402
import engine_checks as EC  # noqa: E402
import llama_ref as L  # noqa: E402  (the data order)

B, T, STEPS, HP = EC.B, EC.T, EC.STEPS, EC.HP
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
# the layouts of 10 AdamW steps (name, launcher prefix, extra arguments): every one, and a short list
LAYOUTS = [("1 rank", (), []),
           ("2 ranks ZeRO-3", MPI, ["--zero", 3]),
           ("2 ranks --tp 2", MPI, ["--tp", 2]),
           ("2 ranks --tp 2 --sequence-parallel", MPI, ["--tp", 2, "--sequence-parallel"]),
           ("2 ranks --pp 2 (1f1b)", MPI, ["--pp", 2, "--pp-schedule", "1f1b"]),
           ("2 ranks --pp 2 (zb1p)", MPI, ["--pp", 2, "--pp-schedule", "zb1p"]),
           ("2 ranks ZeRO-3 CPU offload", MPI, ["--zero", 3, "--offload-optimizer", "cpu"]),
           ("1 rank --activation-checkpoint full", (), ["--activation-checkpoint", "full"])]
LAYOUTS_SHORT = [LAYOUTS[0], LAYOUTS[4]]
# the layouts of a model with MoE layers: every one and expert parallelism (2 data-parallel ranks, the experts
# split over them; docs/moe.md)
LAYOUTS_EP = LAYOUTS + [("2 ranks --ep 2", MPI, ["--ep", 2])]
DOC_STARTS = np.cumsum([0, 37, 5, 120, 1, 64, 200, 88, 150])[:-1]  # EC.make_data's documents


def data_parallel(pre, extra):
    """A layout over 2 ranks that are data-parallel (ZeRO, EP: neither --tp nor --pp)."""
    return bool(pre) and not any(a in ("--tp", "--pp") for a in extra)


class Harness:
    """--shardlm EXE --work DIR; the data of EC.make_data under DIR."""

    def __init__(self, oracle):
        ap = argparse.ArgumentParser()
        ap.add_argument("--shardlm", required=True)
        ap.add_argument("--work", required=True)
        a = ap.parse_args()
        self.exe, self.w = os.path.abspath(a.shardlm), os.path.abspath(a.work)
        torch.set_num_threads(2)
        self.R = oracle
        EC.L = oracle  # compare_training reloads the saved dir with EC.L.load_hf
        self.ck = EC.Checker()
        self.data = os.path.join(self.w, "data")
        self.stream = EC.make_data(self.data)

    def engine(self, args, log, pre=()):
        ok, msg = EC.run_engine(pre[0] if pre else self.exe, (list(pre[1:]) + [self.exe] if pre else []) + list(args),
                                os.path.join(self.w, log))
        if not ok:
            self.ck(f"shardlm {args[0]} ({log})", False, msg)
        return ok

    def ref_rows(self, mdir):
        m = self.R.load_hf(mdir)
        return m, self.R.train(m, self.stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"], HP["wd"],
                               HP["b1"], HP["b2"], HP["eps"], HP["clip"])

    def split_names(self, m):
        """(names compared relatively, names whose gradient is analytically zero: R.ZERO_GRAD)."""
        names = [n for n, _ in m.named_parameters()]
        z = self.R.ZERO_GRAD
        return [n for n in names if not n.endswith(z)], [n for n in names if n.endswith(z)]

    def zero_grads(self, label, path, ref, zero):
        """The analytically-zero gradients (the key biases without RoPE) of an engine dump: at most
        DUMP_TOL times the model's largest reference gradient (rounding, not a signal)."""
        if not zero or not path:
            return
        e = common.st_read(path)
        top = max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("grad."))
        worst = max(float(np.abs(e["grad." + n]).max()) if "grad." + n in e else float("inf") for n in zero)
        self.ck(f"{label}: the key-bias gradients, analytically zero without RoPE, are rounding "
                f"(<= {EC.DUMP_TOL:g} x the largest gradient {top:.2e})", worst <= EC.DUMP_TOL * top,
                f"max|grad| {worst:.1e}; PyTorch fp32 "
                + f"{max(float(np.abs(ref['grad.' + n]).max()) for n in zero):.1e}")

    def moe_trace(self, mdir, blocks, dtype=torch.float32, **variant):
        """The reference's dump forward and 10 steps (whole batches) on mdir in dtype: per forward, per MoE
        layer (blocks(model): its MoE modules, each keeping its last forward's choice scores `choice` (N, E)
        and selected experts `selected` (N, k)), (choice, selected)."""
        m = self.R.load_hf(mdir, dtype, **variant)
        rec, orig = [], m.forward

        def fwd(*a, **k):
            out = orig(*a, **k)
            rec.append([(b.choice.clone(), b.selected.clone()) for b in blocks(m)])
            return out
        m.forward = fwd
        self.R.dump(m, self.stream, B, T)
        self.R.train(m, self.stream, STEPS, B, T, EC.ACCUM, HP["lr"], HP["min_lr"], HP["warmup"], HP["wd"], HP["b1"],
                     HP["b2"], HP["eps"], HP["clip"])
        return rec

    def compare_dump(self, label, path, ref, m):
        rel_names, zero = self.split_names(m)
        EC.compare_dump(self.ck, label, path, ref, rel_names)
        self.zero_grads(label, path, ref, zero)

    def suite(self, tag, cfg, seed, layouts):
        """Save R.init_model(cfg, seed) as model_TAG; its dumps under every checkpointing mode vs
        PyTorch, then 10 AdamW steps per layout (name, launcher prefix, extra args) vs R.train.
        Returns (the model dir, the dumps by mode, the reference dump)."""
        R, w = self.R, self.w
        mdir = os.path.join(w, "model_" + tag)
        R.save_hf(R.init_model(cfg, seed=seed), mdir)
        ref_m = R.load_hf(mdir)
        rel_names, zero = self.split_names(ref_m)
        ref = R.dump(ref_m, self.stream, B, T)
        ref64 = R.dump(R.load_hf(mdir, torch.float64), self.stream, B, T)
        noise = max(EC.rel_err(ref[k], ref64[k]) for k in ref if not k.endswith(R.ZERO_GRAD))
        label = (f"[{tag}] dump vs PyTorch: logits, loss, all grads ({EC.DUMP_TOL:g} rel; torch fp32 vs fp64 "
                 f"{noise:.1e})")
        dumps = EC.dump_modes(self.ck, self.exe, w, mdir, self.data, ref, rel_names, label, tag)
        self.zero_grads(f"[{tag}] dump", dumps.get("none"), ref, zero)
        m, rows = self.ref_rows(mdir)
        nclip = sum(r["grad_norm"] > HP["clip"] for r in rows)
        self.ck(f"[{tag}] reference clipping active", nclip >= 1, f"{nclip}/{STEPS} steps; ref losses "
                + " ".join(f"{r['loss']:.4f}" for r in rows))
        for name, pre, extra in layouts:
            met, save = os.path.join(w, f"metrics_{tag}_{name}.jsonl"), os.path.join(w, f"saved_{tag}_{name}")
            args = EC.train_args(mdir, self.data, met, save, "none")
            if data_parallel(pre, extra):  # 2 data-parallel ranks: half the accumulation keeps the global batch
                args[args.index("--grad-accum") + 1] = EC.ACCUM // 2
            if self.engine(args + extra, f"train_{tag}_{name}.log", pre):
                EC.compare_training(self.ck, f"[{tag}] train {name}", met, save, rows, m)
        return mdir, dumps, ref

    def negative_controls(self, cases):
        """cases: (tag, model dir, its dumps, a load_hf variant, what it is): the reference so
        changed is far (> 100 x DUMP_TOL in the logits) from the engine's dump."""
        for tag, mdir, dumps, variant, what in cases:
            if dumps.get("none"):
                r = self.R.dump(self.R.load_hf(mdir, **variant), self.stream, B, T)
                e = common.st_read(dumps["none"])
                err = EC.rel_err(e["logits"].reshape(r["logits"].shape), r["logits"])
                self.ck(f"[negative control] [{tag}] the reference with {what} differs from the engine",
                        err > 100 * EC.DUMP_TOL, f"logits rel {err:.2e}")

    def round_trip(self, tag, mdir, config_cls, what):
        """--steps 0 --save: the same tensor names byte-identical, and the saved config.json read by
        config_cls equal to the original's (its to_dict), architectures and model_type included."""
        rt = os.path.join(self.w, "rt_" + tag)
        if not self.engine(["train", "--model", mdir, "--data", self.data, "--steps", 0, "--micro-batch", B,
                            "--seq-len", T, "--save", rt], f"rt_{tag}.log"):
            return
        a = common.st_read(os.path.join(mdir, "model.safetensors"), to_f32=False)
        b = common.st_read(os.path.join(rt, "model.safetensors"), to_f32=False)
        same = set(a) == set(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
        self.ck(f"[round trip] [{tag}] --steps 0 --save: the same tensor names, byte-identical", same,
                f"{len(a)} tensors" if same else f"names differ: {sorted(set(a) ^ set(b))}" if set(a) != set(b)
                else f"differ: {[k for k in a if a[k].tobytes() != b[k].tobytes()]}")
        try:
            c0, c1 = config_cls(common.config_read(mdir)).to_dict(), config_cls(common.config_read(rt)).to_dict()
            raw = common.config_read(rt)
            fam = raw.get("model_type") == c0["model_type"] and raw.get("architectures") == c0["architectures"]
            self.ck(f"[round trip] [{tag}] saved config.json reads back the same ({what})", c0 == c1 and fam,
                    str({k: (v, c1.get(k)) for k, v in c0.items() if c1.get(k) != v}) if c0 != c1 else
                    "" if fam else f"architectures {raw.get('architectures')} model_type {raw.get('model_type')}")
        except Exception as ex:  # noqa: BLE001
            self.ck(f"[round trip] [{tag}] saved config.json", False, str(ex))

    def config_form(self, what, edit, src_dir, base_dump, d):
        """The config.json dict d (a form of src_dir's) with src_dir's weights: its dump (checkpointing
        none) bit-identical to base_dump."""
        mt = os.path.join(self.w, "model_cfg_" + edit)
        os.makedirs(mt, exist_ok=True)
        with open(os.path.join(mt, "config.json"), "w") as f:
            json.dump(d, f)
        os.link(os.path.join(src_dir, "model.safetensors"), os.path.join(mt, "model.safetensors"))
        out = os.path.join(self.w, f"dump_cfg_{edit}.safetensors")
        if self.engine(EC.dump_args(mt, self.data, out, "none"), f"dump_cfg_{edit}.log") and base_dump:
            eq, det = EC.tensors_bit_equal(out, base_dump)
            self.ck(f"[config] {what} (dump bit-identical)", eq, det)

    def docs_dump(self, m, reset=True):
        """The engine's dump with document masking, by running each document piece of a row on its
        own (attention sees only its document, the recurrent mixers restart); reset False: the whole
        row (the negative control)."""
        m.zero_grad(set_to_none=True)
        x, y = L.batch(self.stream, 0, B, T)
        rows = []
        for r in range(B):
            cut = [0] + [int(d - r * T) for d in DOC_STARTS if reset and 0 < d - r * T < T] + [T]
            rows.append(torch.cat([m(x[r:r + 1, a:b]) for a, b in zip(cut, cut[1:])], dim=1))
        logits = torch.cat(rows, 0)
        loss = self.R.loss_fn(logits, y)
        loss.backward()
        out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(),
               "loss": np.array([loss.item()], np.float32)}
        for n, p in m.named_parameters():
            out["grad." + n] = p.grad.detach().numpy().copy()
        return out

    def doc_mask(self, tags_dirs):
        """--doc-attention-mask: a packed row = its documents run separately (logits, loss, all grads),
        the row run whole far off, and the checkpointing modes bit-identical."""
        for tag, mdir in tags_dirs:
            mm = self.R.load_hf(mdir)
            ref, ref_cont = self.docs_dump(mm), self.docs_dump(mm, reset=False)
            out = os.path.join(self.w, f"dump_docs_{tag}.safetensors")
            if not self.engine(EC.dump_args(mdir, self.data, out, "none") + ["--doc-attention-mask", "true"],
                               f"dump_docs_{tag}.log"):
                continue
            self.compare_dump(f"[{tag}] --doc-attention-mask: a packed row = its documents run separately (logits, "
                              f"loss, all grads, {EC.DUMP_TOL:g} rel)", out, ref, mm)
            e = common.st_read(out)
            err = EC.rel_err(e["logits"].reshape(ref_cont["logits"].shape), ref_cont["logits"])
            self.ck(f"[{tag}] negative control: the row run without resets differs from the engine's",
                    err > 100 * EC.DUMP_TOL, f"logits rel {err:.2e}")
            for mode in ("selective", "full"):
                o2 = os.path.join(self.w, f"dump_docs_{tag}_{mode}.safetensors")
                if self.engine(EC.dump_args(mdir, self.data, o2, mode) + ["--doc-attention-mask", "true"],
                               f"docs_{tag}_{mode}.log"):
                    eq, det = EC.tensors_bit_equal(out, o2)
                    self.ck(f"[{tag}] --doc-attention-mask dump bit-identical none vs {mode}", eq, det)

    def finish(self):
        print(f"{self.ck.passed} passed, {self.ck.failed} failed")
        sys.exit(1 if self.ck.failed else 0)


def smallest_gap(rec, k, layer="MoE layer"):
    """(the smallest k-th minus (k+1)-th choice score of a moe_trace, where: forward 0 the dump, then step s,
    `layer` and its index among the traced MoE layers)."""
    return min((float((r[:, k - 1] - r[:, k]).min()), f"{'dump' if f == 0 else f'step {f}'} {layer} {la}")
               for f, fw in enumerate(rec) for la, (ch, _) in enumerate(fw)
               for r in (torch.sort(ch, dim=-1, descending=True).values,))


def loads(fw, ne):
    """Tokens per expert per traced MoE layer of one forward of a moe_trace."""
    return [np.bincount(sel.reshape(-1).numpy(), minlength=ne).tolist() for _, sel in fw]
