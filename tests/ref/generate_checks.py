"""`shardlm generate` against PyTorch's greedy continuation by full recompute.

Usage: generate_checks.py --shardlm PATH --work DIR
The reference recomputes the whole sequence for every new token (no cache),
so it is an independent oracle of the engine's K/V cache and recurrent state.
Checks (one line each, then "N passed, M failed"):
  1. greedy, 32 new tokens, token for token: Llama (GQA, untied), Llama
     (tied), Mistral with sliding_window 5 (shorter than the 40-token
     sequence), Qwen2 (q/k/v biases), Qwen2 with use_sliding_window (window 5
     on layer 1 >= max_window_layers 1, layer 0 full), Gemma 2 (window on even layers, both
     softcaps, (1 + w) sandwich norms, scaled embeddings, GeGLU; its
     attention softcap changes the continuation), Gemma 3 ((1 + w) q/k
     norms, sliding layers on rope_local_base_freq, the global one with
     linear rope_scaling; the local base changes the continuation), Mamba
     (recurrent conv + SSM state), Falcon-Mamba (the dt/B/C norms; a control:
     without them the continuation differs), Mamba-2 (two groups, a clamping
     time_step_limit; a control: transformers' whole-width gated norm gives
     another continuation), Mixtral and Qwen3-MoE (the router's top k, renormalised or not),
     Nemotron-H (M * M - layers: a Mamba-2 state and a K/V cache side by
     side, attention without RoPE, the squared-ReLU MLP; a control: with
     RoPE the continuation differs), Nemotron-H with MoE layers (M * E M E:
     the sigmoid router with its e_score_correction_bias, the shared expert;
     controls: without the bias, and with softmax scores, the continuation
     differs), Granite 4.0-H (mamba / attention
     layers, each with the shared SwiGLU MLP, its four multipliers; a
     control: without residual_multiplier the continuation differs), and
     with experts (the shared MLP and 4 experts top-2; controls: without
     the renormalisation, without the shared MLP);
  2. sampling (temperature 0.8, top-p 0.9) is reproducible for a seed and
     differs across seeds;
  3. a byte-level model generates from a text prompt (bytes out);
  4. bad input: prompt longer than max_position_embeddings, --tokenizer (not
     in this build), a prompt id outside the vocabulary, --max-new-tokens -1,
     --decode cache with --backend cuda, an unknown --decode or backend:
     exit 2 with a message; generation stops at the context. --backend cpu
     and auto (the CPU here) give the default's ids.
  1b. --decode forward (each token from one training forward of the window,
     engine/fwd_session.c), fp32 on the CPU: every model of 1 gives the
     reference's ids;
  1c. with build/shardlm_emu (the CUDA backend emulated on the CPU):
     --backend cuda (--decode forward, fp32) gives the reference's first 16
     ids for a model of each kind (Llama with YaRN, Qwen2's window, Gemma 3,
     Mamba, Falcon-Mamba, Mamba-2, Mixtral, Qwen3-MoE, Nemotron-H and
     Granite 4.0-H with experts).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402
import mamba2_ref as M2  # noqa: E402
import mamba_ref as M  # noqa: E402
import granite_h_ref as GH  # noqa: E402
import nemotron_h_ref as NH  # noqa: E402
from eval_checks import Checker, run  # noqa: E402

VOCAB, NEW = 97, 32
PROMPT = [5, 17, 3, 88, 42, 9, 60, 23]


def greedy_ref(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids], dtype=torch.int64))[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


def set_config(d, **kv):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    c.update(kv)
    with open(p, "w") as f:
        json.dump(c, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    exe, W = a.shardlm, a.work
    ck = Checker()
    models = {
        "llama": L.init_model(L.make_config(vocab=VOCAB), seed=11, std=0.3),
        "llama tied": L.init_model(L.make_config(vocab=VOCAB, tied=True, kv_heads=4), seed=12, std=0.3),
        "mistral window 5": L.init_model(L.make_config(vocab=VOCAB, mistral=True, sliding_window=5), seed=13,
                                         std=0.3),
        "mamba": M.init_model(M.make_config(vocab=VOCAB), seed=14, std=0.3),
        # YaRN with its default attention factor (0.1 ln 4 + 1): q.k times its square
        "llama yarn": L.init_model(L.make_config(vocab=VOCAB, head_dim=16, max_position_embeddings=512,
                                                 rope_scaling={"rope_type": "yarn", "factor": 4.0}), seed=15, std=0.3),
        "qwen2": L.init_model(L.make_config(vocab=VOCAB, family="qwen2"), seed=16, std=0.3),
        # Qwen2's per-layer window: layer 1 (>= max_window_layers) slides, layer 0 is full
        "qwen2 window 5": L.init_model(L.make_config(vocab=VOCAB, family="qwen2", use_sliding_window=True,
                                                     sliding_window=5, max_window_layers=1), seed=19, std=0.3),
        "falcon mamba": M.init_model(M.make_config(vocab=VOCAB, tied=False, falcon=True), seed=17, std=0.3),
        # mixtures of experts: Mixtral (top 2 of 4, renormalised) and Qwen3-MoE without norm_topk_prob
        "mixtral": L.init_model(L.make_config(vocab=VOCAB, intermediate=32, family="mixtral", num_local_experts=4,
                                              num_experts_per_tok=2), seed=21, std=0.3),
        "qwen3 moe": L.init_model(L.make_config(vocab=VOCAB, family="qwen3_moe", head_dim=16, num_experts=4,
                                                num_experts_per_tok=2, moe_intermediate_size=24,
                                                norm_topk_prob=False), seed=22, std=0.3),
        # Mamba-2: two groups (the per-group gated norm), a time_step_limit that clamps, biases
        "mamba2": M2.init_model(M2.make_config(vocab=VOCAB, heads=8, groups=2, limit=(0.002, 0.08)), seed=20, std=0.3),
        # Gemma 2: (1 + w) and sandwich norms, scaled embeddings, GeGLU, both softcaps, a window on even layers
        "gemma2": L.init_model(L.make_config(vocab=VOCAB, family="gemma2", layers=3, tied=True, head_dim=16,
                                             sliding_window=5, attn_logit_softcapping=1.0, final_logit_softcapping=3.0,
                                             query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh"),
                               seed=17, std=0.1, norm_jitter=0.1),
        # Gemma 3: (1 + w) q/k norms, layers 0, 1 sliding on the local RoPE base, layer 2 global (linear scaling)
        "gemma3": L.init_model(L.make_config(vocab=VOCAB, family="gemma3_text", layers=3, tied=True, head_dim=16,
                                             sliding_window=5, sliding_window_pattern=3, rope_local_base_freq=100.0,
                                             rope_scaling={"rope_type": "linear", "factor": 4.0},
                                             query_pre_attn_scalar=4, hidden_activation="gelu_pytorch_tanh"),
                               seed=18, std=0.1, norm_jitter=0.1),  # scalar 4: sharp scores, so RoPE matters
        # Nemotron-H: Mamba-2 (two groups, a clamping time_step_limit), attention without RoPE, relu^2 MLP
        "nemotron h": NH.init_model(NH.make_config("M*M-", vocab=VOCAB, limit=(0.002, 0.08)), seed=23, std=0.3),
        # Granite 4.0-H: a Mamba-2 and an attention layer, each followed by the shared MLP; muP multipliers
        "granite h": GH.init_model(GH.make_config(("mamba", "attention", "mamba"), vocab=VOCAB), seed=24, std=0.3),
    }
    # ---- Nemotron-H with 'E' (MoE) layers (the engine's generate does not run them yet: this row fails until it
    # does). "M*EME": 4 experts top-2 of width 24, the shared expert of width 40, sigmoid router with its
    # e_score_correction_bias, routed_scaling_factor 2.5. Seed 25: the smallest top-k gap of choice scores along
    # the 40 positions is 7.5e-3, the smallest top-1 logit gap of the 32 greedy picks 9.0e-2 (no near-tie).
    models["nemotron h moe"] = NH.init_model(NH.make_config(
        "M*EME", vocab=VOCAB, limit=(0.002, 0.08), n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=40, routed_scaling_factor=2.5), seed=25, std=0.3)
    # ---- Granite 4.0-H with experts (config_moe: each MLP half the shared MLP of width 40 plus 4 fused SwiGLU
    # experts top-2 of width 24, the router's top-2 logits softmaxed). Seed 26: the smallest gap between the 2nd
    # and 3rd router logits along the 40 positions is 6.3e-3, the smallest top-1 logit gap of the 32 greedy picks
    # 3.6e-2 (no near-tie)
    models["granite h moe"] = GH.init_model(GH.config_moe(vocab=VOCAB), seed=26, std=0.3)
    dirs = {}
    for name, m in models.items():
        d = os.path.join(W, name.replace(" ", "_"))
        os.makedirs(d)
        (NH if name.startswith("nemotron") else GH if name.startswith("granite") else M2 if name.startswith("mamba2")
         else M if "mamba" in name else L).save_hf(m, d)
        dirs[name] = d
    set_config(dirs["mamba2"], eos_token_id=None)  # Mamba2Config's default eos 2 would end the greedy run early
    set_config(dirs["granite h moe"], eos_token_id=None)  # so would Granite's (token 2 is its 26th pick here)
    ids_arg = ",".join(map(str, PROMPT))

    # 1. greedy vs full recompute
    refs = {}
    for name, m in models.items():
        ref = refs[name] = greedy_ref(m, PROMPT, NEW)
        rc, out, err = run([exe, "generate", "--model", dirs[name], "--prompt-ids", ids_arg, "--temperature", 0,
                            "--max-new-tokens", NEW, "--print-ids"], W)
        if rc != 0:
            ck(f"greedy {name}", False, f"exit {rc}: {err.strip()[-300:]}")
            continue
        got = [int(x) for x in out.strip().split(",")]
        first = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), None)
        ck(f"greedy {name}: {NEW} tokens = PyTorch full recompute", got == ref,
           "identical" if got == ref else f"first difference at token {first}: {got} vs {ref}")

    # 1b. --decode forward (engine/fwd_session.c: each new token from one training forward of the window so far,
    # the sub-layers the training runs), fp32 on the CPU: the reference's ids, every family
    for name in models:
        rc, out, err = run([exe, "generate", "--model", dirs[name], "--prompt-ids", ids_arg, "--temperature", 0,
                            "--max-new-tokens", NEW, "--print-ids", "--decode", "forward", "--compute-dtype", "fp32"], W)
        got = [int(x) for x in out.strip().split(",")] if rc == 0 else None
        ck(f"greedy {name} --decode forward (the training forward): {NEW} tokens = PyTorch full recompute",
           got == refs[name], "identical" if got == refs[name] else f"exit {rc}: {got} vs {refs[name]}; {err[-200:]}")
    # 1c. the emulated device (build/shardlm_emu, tests/cuda_emu: the CUDA kernels on the CPU) generates with
    # --backend cuda (--decode forward, fp32): a model of each kind, 16 tokens = the CPU cache's
    emu = os.path.join(os.path.dirname(exe), "shardlm_emu")
    if os.path.exists(emu):
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1")
        for name in ("llama yarn", "qwen2 window 5", "gemma3", "mamba", "falcon mamba", "mamba2", "mixtral",
                     "qwen3 moe", "nemotron h moe", "granite h moe"):
            r = subprocess.run([emu, "generate", "--model", dirs[name], "--prompt-ids", ids_arg, "--temperature", "0",
                                "--max-new-tokens", "16", "--print-ids", "--backend", "cuda", "--compute-dtype",
                                "fp32"], capture_output=True, text=True, cwd=W, env=env)
            got = [int(x) for x in r.stdout.strip().split(",")] if r.returncode == 0 else None
            ck(f"greedy {name} on the emulated device (--backend cuda): 16 tokens = the CPU's", got == refs[name][:16],
               "identical" if got == refs[name][:16] else
               f"exit {r.returncode}: {got} vs {refs[name][:16]}; {r.stderr[-200:]}")
    else:
        print(f"(no {emu}: the emulated device's generate is not checked in this build)")

    # the window must matter for this model and prompt, or the Mistral check is vacuous
    mw = models["mistral window 5"]
    mw.config.sliding_window = 0
    full = greedy_ref(mw, PROMPT, NEW)
    mw.config.sliding_window = 5
    ck("mistral: the window changes the greedy continuation (check not vacuous)",
       full != greedy_ref(mw, PROMPT, NEW))
    qw = models["qwen2 window 5"]
    with_win = greedy_ref(qw, PROMPT, NEW)
    qw.model.layers[1].self_attn.window = 0
    ck("qwen2: the window of layer 1 changes the greedy continuation (check not vacuous)",
       with_win != greedy_ref(qw, PROMPT, NEW))
    # the attention softcap must matter for the Gemma 2 check (the final one is monotonic: greedy ignores it)
    gm = models["gemma2"]
    with_cap = greedy_ref(gm, PROMPT, NEW)
    gm.config.attn_softcap = 0.0
    ck("gemma2: the attention softcap changes the greedy continuation (check not vacuous)",
       with_cap != greedy_ref(gm, PROMPT, NEW))
    # the local RoPE base must matter for the Gemma 3 check
    g3 = models["gemma3"]
    with_local = greedy_ref(g3, PROMPT, NEW)
    g3.config.rope_local_theta = g3.config.rope_theta
    ck("gemma3: the local RoPE base changes the greedy continuation (check not vacuous)",
       with_local != greedy_ref(g3, PROMPT, NEW))

    # the q/k/v biases must matter too, or the Qwen2 check is vacuous
    mq = models["qwen2"]
    with torch.no_grad():
        for n, p in mq.named_parameters():
            if n.endswith("_proj.bias"):
                p.zero_()
    ck("qwen2: the biases change the greedy continuation (check not vacuous)",
       greedy_ref(mq, PROMPT, NEW) != greedy_ref(L.load_hf(dirs["qwen2"]), PROMPT, NEW))

    # the dt/B/C norms must matter too, or the Falcon-Mamba check is vacuous
    mf = models["falcon mamba"]
    mf.config.falcon = False
    ck("falcon mamba: the dt/B/C norms change the greedy continuation (check not vacuous)",
       greedy_ref(mf, PROMPT, NEW) != greedy_ref(M.load_hf(dirs["falcon mamba"]), PROMPT, NEW))
    mf.config.falcon = True

    # the per-group gated norm must matter for the Mamba-2 check (transformers' whole-width norm differs)
    m2w = M2.Mamba2ForCausalLM(models["mamba2"].config, norm_groups=1)
    m2w.load_state_dict(models["mamba2"].state_dict())
    ck("mamba2: the per-group gated norm changes the greedy continuation (check not vacuous)",
       greedy_ref(m2w, PROMPT, NEW) != greedy_ref(models["mamba2"], PROMPT, NEW))
    # Nemotron-H's attention has no RoPE: with it the continuation differs (the check sees the attention layer)
    nhr = NH.load_hf(dirs["nemotron h"], rope_theta=10000.0)
    ck("nemotron h: RoPE in its attention layer changes the greedy continuation (check not vacuous)",
       greedy_ref(nhr, PROMPT, NEW) != greedy_ref(models["nemotron h"], PROMPT, NEW))
    # ---- Nemotron-H MoE: the router's bias and its sigmoid scores each change the continuation (not vacuous)
    for what, variant in (("e_score_correction_bias", dict(moe_bias=False)),
                          ("the sigmoid scores (a softmax instead)", dict(moe_score="softmax"))):
        ck(f"nemotron h moe: {what} changes the greedy continuation (check not vacuous)",
           greedy_ref(NH.load_hf(dirs["nemotron h moe"], **variant), PROMPT, NEW)
           != greedy_ref(models["nemotron h moe"], PROMPT, NEW))
    for what, variant in (("the experts' renormalised top-2 weights (all-4 softmax weights instead)",
                           dict(moe_renorm=False)),
                          ("the shared MLP beside the experts", dict(moe_shared=False))):
        ck(f"granite h moe: {what} changes the greedy continuation (check not vacuous)",
           greedy_ref(GH.load_hf(dirs["granite h moe"], **variant), PROMPT, NEW)
           != greedy_ref(models["granite h moe"], PROMPT, NEW))
    ghr = GH.load_hf(dirs["granite h"], ignore=("residual_multiplier",))
    ck("granite h: residual_multiplier changes the greedy continuation (check not vacuous)",
       greedy_ref(ghr, PROMPT, NEW) != greedy_ref(models["granite h"], PROMPT, NEW))

    # 2. sampling: reproducible per seed
    def sample(seed):
        return run([exe, "generate", "--model", dirs["llama"], "--prompt-ids", ids_arg, "--temperature", 0.8,
                    "--top-p", 0.9, "--seed", seed, "--max-new-tokens", 24, "--print-ids"], W)
    r1, r2, r3 = sample(1), sample(1), sample(2)
    ok = r1[0] == 0 and r1[1] == r2[1] and r1[1] != r3[1] and \
        all(0 <= int(x) < VOCAB for x in r1[1].strip().split(","))
    ck("sampling reproducible for a seed, different across seeds", ok, f"{r1[1].strip()} | {r3[1].strip()}")

    # 3. byte-level model: text in, bytes out
    bdir = os.path.join(W, "bytes")
    os.makedirs(bdir)
    L.save_hf(L.init_model(L.make_config(vocab=257, hidden=32, heads=2, kv_heads=1, intermediate=64), seed=5), bdir)
    rc, out, err = run([exe, "generate", "--model", bdir, "--prompt", "hello", "--temperature", 0,
                        "--max-new-tokens", 8], W)
    ck("byte-level text prompt", rc == 0 and out.startswith("hello"), f"exit {rc}, output {out[:40]!r}")

    # 3b. a tokenizer.json: the prompt is encoded and the continuation decoded
    # by shardlm's tokenizer; the ids equal a run on the encoded ids, the
    # text is the prompt followed by detok of the new ids
    tok = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "tokenizer",
                       "synth_c.json")
    tdir = os.path.join(W, "tokmodel")
    os.makedirs(tdir)
    L.save_hf(L.init_model(L.make_config(vocab=277, hidden=32, heads=2, kv_heads=1, intermediate=64), seed=6,
                           std=0.3), tdir)
    enc = subprocess.run([exe, "tokenize", "--tokenizer", tok, "--ids"], input="hello world 123", text=True,
                         capture_output=True).stdout.split()
    g = ["generate", "--model", tdir, "--temperature", 0, "--max-new-tokens", 12]
    r_ids = run([exe] + g + ["--prompt-ids", ",".join(enc), "--print-ids"], W)
    r_tok = run([exe] + g + ["--tokenizer", tok, "--prompt", "hello world 123", "--print-ids"], W)
    r_txt = run([exe] + g + ["--tokenizer", tok, "--prompt", "hello world 123"], W)
    new_ids = r_ids[1].strip().split(",") if r_ids[0] == 0 else []
    dec = subprocess.run([exe, "detok", "--tokenizer", tok], input=" ".join(new_ids), text=True,
                         capture_output=True).stdout
    ck("--tokenizer: same ids as --prompt-ids of the encoded prompt, text = prompt + detok(new ids)",
       len(enc) > 0 and r_ids[0] == 0 and r_tok[0] == 0 and r_tok[1] == r_ids[1] and r_txt[0] == 0
       and r_txt[1].rstrip("\n") == "hello world 123" + dec.rstrip("\n"),
       f"ids {r_ids[1].strip()} / {r_tok[1].strip()}; text {r_txt[1]!r} vs detok {dec!r}; {r_tok[2][-200:]}")

    # --backend cpu and auto (the CPU: generate has no device path) give the default's ids
    gcmd = [exe, "generate", "--model", dirs["llama"], "--prompt-ids", ids_arg, "--temperature", 0,
            "--max-new-tokens", NEW, "--print-ids"]
    base = run(gcmd, W)
    for be in ("cpu", "auto"):
        r = run(gcmd + ["--backend", be], W)
        ck(f"--backend {be}: the default's ids", base[0] == 0 and r[0] == 0 and r[1] == base[1],
           f"exit {r[0]}: {r[1].strip()[:80]} vs {base[1].strip()[:80]}; {r[2].strip()[-160:]}")

    # 4. bad input and the context limit
    set_config(dirs["llama"], max_position_embeddings=16)
    long_ids = ",".join(str(i % VOCAB) for i in range(17))
    cases = [("prompt longer than max_position_embeddings", ["--model", dirs["llama"], "--prompt-ids", long_ids],
              "max_position_embeddings"),
             ("a tokenizer with more ids than the model", ["--model", dirs["llama"], "--prompt", "hi", "--tokenizer",
              tok], "do not belong together"),
             ("a directory without tokenizer.json", ["--model", dirs["llama"], "--prompt", "hi", "--tokenizer", W],
              "tokenizer.json"),
             ("prompt id outside the vocabulary", ["--model", dirs["llama"], "--prompt-ids", "1,97"],
              "vocabulary"),
             ("--max-new-tokens -1", ["--model", dirs["llama"], "--prompt-ids", "1", "--max-new-tokens", -1],
              "--max-new-tokens"),
             ("text prompt on a non-byte model", ["--model", dirs["llama"], "--prompt", "hi"], "byte-level"),
             ("--decode cache on a device", ["--model", dirs["llama"], "--prompt-ids", "1", "--backend", "cuda",
              "--decode", "cache"], "--decode cache runs on the CPU"),
             ("--decode beam", ["--model", dirs["llama"], "--prompt-ids", "1", "--decode", "beam"],
              "--decode must be cache or forward, found 'beam'"),
             ("--backend tpu", ["--model", dirs["llama"], "--prompt-ids", "1", "--backend", "tpu"],
              "--backend must be cpu, cuda or auto, found 'tpu'")]
    for label, args, want in cases:
        rc, out, err = run([exe, "generate"] + args, W)
        ck(f"bad input: {label}: exit 2", rc == 2 and want in err, f"exit {rc}: {err.strip()[:160]}")
    rc, out, err = run([exe, "generate", "--model", dirs["llama"], "--prompt-ids", ids_arg, "--temperature", 0,
                        "--max-new-tokens", NEW, "--print-ids"], W)
    n = len(out.strip().split(",")) if rc == 0 else -1
    ck("generation stops at the context (8 + 8 = 16 positions)", rc == 0 and n == 8 and "context" in err,
       f"exit {rc}, {n} tokens")
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
