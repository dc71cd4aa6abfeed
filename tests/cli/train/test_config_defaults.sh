#!/usr/bin/env bash
# A config.json field left out takes transformers' default for that model
# type (issue 43 item 5), for every family. The oracle below is this test's
# own transcription of transformers' configuration classes
# (src/transformers/models/<type>/configuration_<type>.py: the __init__ /
# dataclass defaults and what __post_init__ derives), written separately from
# the engine's table (formats/hfconfig.c k_defaults). Two checks per family:
#  - sizes: `shardlm plan` of a config.json with nothing but the family's
#    name reports the parameter count of transformers' default model,
#    computed here from the oracle's sizes (Nemotron-H: transformers'
#    default layers ME*- hold a MoE layer, which the reader refuses: its
#    bare config is refused asking for the layer pattern, ME*- given is
#    refused naming the MoE layer, and the sizes are checked with M*- given);
#  - every other field: a tiny model of the family that gives only its sizes
#    (and the fields a tiny shape needs) is trained one step and saved; the
#    saved config.json (every field the engine resolved) holds the oracle's
#    value for each field left out.
# Negative control: the same comparison against the engine's old defaults
# (Mixtral rope_theta 1e4 / rms_norm_eps 1e-6, Mistral without a window,
# kv heads = heads) must report mismatches.
source "${SL_SRC:?}/tests/lib/run.sh" config_defaults numpy
tiny_data "$W/data" 8000
"$PY" - "$W" "$B" "$W/data" "--init random" << 'P'
import json, math, os, subprocess, sys
W, B, DATA, INIT = sys.argv[1:5]
# ---- the oracle: transformers' defaults per model type -------------------------------------
N = None
base = dict(initializer_range=0.02)
ORACLE = {
 "LlamaForCausalLM": dict(base, vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads="heads", head_dim="hidden/heads", max_position_embeddings=2048,
     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
     attention_bias=False, mlp_bias=False),
 # transformers' GraniteConfig: LlamaConfig's fields and defaults (no head_dim field: hidden / heads), the four muP
 # multipliers 1.0
 "GraniteForCausalLM": dict(base, vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads="heads", head_dim="hidden/heads", max_position_embeddings=2048,
     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
     attention_bias=False, mlp_bias=False, embedding_multiplier=1.0, logits_scaling=1.0, residual_multiplier=1.0,
     attention_multiplier=1.0),
 "MistralForCausalLM": dict(base, vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads=8, head_dim="hidden/heads", max_position_embeddings=4096 * 32,
     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
     sliding_window=4096),
 "MixtralForCausalLM": dict(base, vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads=8, head_dim="hidden/heads", max_position_embeddings=4096 * 32,
     rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
     sliding_window=N, num_experts_per_tok=2, num_local_experts=8, output_router_logits=False,
     router_aux_loss_coef=0.001),
 "Qwen2ForCausalLM": dict(base, vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads=32, head_dim="hidden/heads", max_position_embeddings=32768,
     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=N, eos_token_id=N,
     use_sliding_window=False),
 "Qwen3ForCausalLM": dict(base, vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=32768, rms_norm_eps=1e-6,
     rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=N, eos_token_id=N, attention_bias=False,
     use_sliding_window=False),
 "Qwen3MoeForCausalLM": dict(base, vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
     num_attention_heads=32, num_key_value_heads=4, head_dim="hidden/heads", max_position_embeddings=32768,
     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=N, eos_token_id=N,
     attention_bias=False, decoder_sparse_step=1, moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128,
     norm_topk_prob=False, output_router_logits=False, router_aux_loss_coef=0.001),
 "Gemma2ForCausalLM": dict(base, vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
     num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, rms_norm_eps=1e-6,
     rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, query_pre_attn_scalar=256,
     sliding_window=4096, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
 "Gemma3ForCausalLM": dict(base, vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
     num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072, rms_norm_eps=1e-6,
     rope_theta=1e6, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, query_pre_attn_scalar=256,
     sliding_window=4096, final_logit_softcapping=N, attn_logit_softcapping=N, rope_local_base_freq=10000.0,
     sliding_window_pattern=6),
 "MambaForCausalLM": dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32,
     layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, expand=2, conv_kernel=4, use_bias=False,
     use_conv_bias=True, initializer_range=0.1, residual_in_fp32=True, time_step_rank="auto", time_step_scale=1.0,
     time_step_min=0.001, time_step_max=0.1, time_step_floor=1e-4, tie_word_embeddings=True,
     intermediate_size="expand*hidden"),
 "FalconMambaForCausalLM": dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32,
     layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, expand=2, conv_kernel=4, use_bias=False,
     use_conv_bias=True, initializer_range=0.1, residual_in_fp32=True, time_step_rank="auto", time_step_scale=1.0,
     time_step_min=0.001, time_step_max=0.1, time_step_floor=1e-4, tie_word_embeddings=True, mixer_rms_eps=1e-6,
     intermediate_size="expand*hidden"),
 # transformers' Mamba2Config: no intermediate_size field (the mixer takes expand * hidden_size)
 "Mamba2ForCausalLM": dict(vocab_size=32768, hidden_size=4096, state_size=128, num_hidden_layers=64, num_heads=128,
     head_dim=64, n_groups=8, chunk_size=256, layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=2, expand=2,
     conv_kernel=4, use_bias=False, use_conv_bias=True, initializer_range=0.1, residual_in_fp32=True,
     time_step_min=0.001, time_step_max=0.1, time_step_floor=1e-4, time_step_limit=[0.0, float("inf")],
     tie_word_embeddings=False),
 # transformers' NemotronHConfig (a dataclass; __post_init__: layers_block_type defaults to
 # ["linear_attention", "moe", "full_attention", "mlp"] = "ME*-", num_key_value_heads None -> heads). Not
 # transcribed: moe_latent_size (None; a latent MoE is refused), moe_shared_expert_overlap (an execution hint),
 # the MTP layers', and what training here does not read (use_cache, dropouts, cache dtypes, use_mamba_kernels,
 # num_logits_to_keep, pad_token_id, rescale_prenorm_residual, mamba_proj_bias: the mixer's biases are use_bias)
 "NemotronHForCausalLM": dict(vocab_size=131072, hidden_size=4096, hybrid_override_pattern="ME*-",
     tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, num_attention_heads=32, num_key_value_heads=8,
     head_dim=128, max_position_embeddings=4096, attention_bias=False, sliding_window=N, intermediate_size=21504,
     mlp_hidden_act="relu2", mlp_bias=False, ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64,
     mamba_hidden_act="silu", n_groups=8, conv_kernel=4, expand=2, time_step_min=0.001, time_step_max=0.1,
     time_step_limit=[0.0, float("inf")], time_step_floor=1e-4, use_conv_bias=True, chunk_size=128, use_bias=False,
     initializer_range=0.02, layer_norm_epsilon=1e-5, residual_in_fp32=False, n_routed_experts=8,
     num_experts_per_tok=2, moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688,
     routed_scaling_factor=1.0, n_group=1, topk_group=1, norm_topk_prob=True, n_shared_experts=1),
}
# Nemotron-H: its bare config is refused (the reader asks for the layer pattern, which transformers defaults);
# the sizes are checked with the default pattern given
REFUSED = {"NemotronHForCausalLM": [({}, "hybrid_override_pattern")]}
GIVEN = {"NemotronHForCausalLM": dict(hybrid_override_pattern="ME*-")}

def resolve(cfg, key):
    v = cfg[key]
    if v == "heads": return cfg["num_attention_heads"]
    if v == "hidden/heads": return cfg["hidden_size"] // cfg["num_attention_heads"]
    if v == "expand*hidden": return cfg["expand"] * cfg["hidden_size"]
    if v == "auto": return math.ceil(cfg["hidden_size"] / 16)
    return v

def params(arch, o):
    """transformers' parameter count of the default model (no vocabulary padding)."""
    c = {k: resolve(o, k) for k in o}
    V, H, L = c["vocab_size"], c["hidden_size"], c.get("num_hidden_layers")  # Nemotron-H: its pattern's length
    emb = V * H * (1 if c["tie_word_embeddings"] else 2)
    if arch == "NemotronHForCausalLM":  # per layer its norm and one mixer: M (Mamba-2 of mamba_num_heads x
        # mamba_head_dim channels: in_proj z | x | B | C | dt, conv + bias, dt_bias, A_log, D, gated norm,
        # out_proj), * (q, k, v, o without RoPE) or - (up, down: squared ReLU, no gate)
        D, GS, nh, K = c["mamba_num_heads"] * c["mamba_head_dim"], c["n_groups"] * c["ssm_state_size"], \
            c["mamba_num_heads"], c["conv_kernel"]
        ah, kv, hd, I = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
        E, Ie, Is = c["n_routed_experts"], c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"]
        kind = {"M": H * (2 * D + 2 * GS + nh) + (D + 2 * GS) * (K + 1) + 3 * nh + D + D * H,
                "*": H * ah * hd + 2 * H * kv * hd + ah * hd * H,
                "-": 2 * H * I,
                # E: the router (E, H), E experts' up | down, the shared expert's (the router's
                # e_score_correction_bias is a buffer, not a parameter)
                "E": E * H + E * 2 * H * Ie + 2 * H * Is}
        return emb + sum(H + kind[t] for t in c["hybrid_override_pattern"]) + H
    if arch == "Mamba2ForCausalLM":   # in_proj (z | x | B | C | dt), conv (x | B | C) + bias, dt_bias, A_log, D,
        D, GS, nh, K = c["expand"] * H, c["n_groups"] * c["state_size"], c["num_heads"], c["conv_kernel"]
        layer = H + H * (2 * D + 2 * GS + nh) + (D + 2 * GS) * (K + 1) + 3 * nh + D + D * H   # gated norm, out_proj
        return emb + L * layer + H
    if "Mamba" in arch:
        I, N, K, R = c["intermediate_size"], c["state_size"], c["conv_kernel"], c["time_step_rank"]
        layer = H * 2 * I + I * K + I + I * (R + 2 * N) + R * I + I + I * N + I + I * H + H
        return emb + L * layer + H
    nh, kv, hd, I = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    attn = H * nh * hd + 2 * H * kv * hd + nh * hd * H
    if arch == "Qwen2ForCausalLM": attn += nh * hd + 2 * kv * hd           # q/k/v biases
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM"): attn += 2 * hd  # q/k norms
    norms = 4 * H if "Gemma" in arch else 2 * H
    if arch == "MixtralForCausalLM": mlp = c["num_local_experts"] * (3 * H * I + 0) + c["num_local_experts"] * H
    elif arch == "Qwen3MoeForCausalLM": mlp = c["num_experts"] * 3 * H * c["moe_intermediate_size"] + c["num_experts"] * H
    else: mlp = 3 * H * I
    return emb + L * (attn + mlp + norms) + H

def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)

fails = passes = 0
def check(ok, what):
    global fails, passes
    print(("ok   " if ok else "FAIL ") + what)
    if ok: passes += 1
    else: fails += 1

# ---- sizes: plan of a config.json with the family's name only ------------------------------
for arch, o in ORACLE.items():
    d = os.path.join(W, "bare-" + arch)
    os.makedirs(d, exist_ok=True)
    json.dump({"architectures": [arch]}, open(d + "/config.json", "w"))
    r = run([B, "plan", "--model", d])
    for given, needle in REFUSED.get(arch, []):
        json.dump({"architectures": [arch], **given}, open(d + "/config.json", "w"))
        r = run([B, "plan", "--model", d])
        out = (r.stdout + r.stderr).replace(d + "/", "")
        check(r.returncode == 2 and needle in out and " parameters" not in r.stdout,
              f"{arch} {json.dumps(given)}: refused naming {needle!r} (exit {r.returncode}): {out.strip()[-160:]}")
    if arch in GIVEN:
        json.dump({"architectures": [arch], **GIVEN[arch]}, open(d + "/config.json", "w"))
        o = dict(o, **GIVEN[arch])
        r = run([B, "plan", "--model", d])
    got = None
    for line in r.stdout.splitlines():
        if line.startswith("model: ") and " parameters" in line:
            got = int(line.split()[1])
    want = params(arch, o)
    check(got == want, f"{arch}: transformers' default model{' given ' + str(GIVEN[arch]) if arch in GIVEN else ''} "
          f"has {want:,} parameters; plan says {got}")

# ---- every other field: a tiny model, trained one step and saved --------------------------
# the sizes a tiny model needs (heads chosen so the family's default kv heads divide them)
TINY = {
 "LlamaForCausalLM": dict(hidden_size=32, num_attention_heads=4),
 "GraniteForCausalLM": dict(hidden_size=32, num_attention_heads=4),
 "MistralForCausalLM": dict(hidden_size=32, num_attention_heads=8),
 "MixtralForCausalLM": dict(hidden_size=32, num_attention_heads=8),
 "Qwen2ForCausalLM": dict(hidden_size=64, num_attention_heads=32),
 "Qwen3ForCausalLM": dict(hidden_size=32, num_attention_heads=32),
 "Qwen3MoeForCausalLM": dict(hidden_size=64, num_attention_heads=4, num_experts=8, moe_intermediate_size=8),
 "Gemma2ForCausalLM": dict(hidden_size=32, num_attention_heads=4),
 "Gemma3ForCausalLM": dict(hidden_size=32, num_attention_heads=4),
 "MambaForCausalLM": dict(hidden_size=32),
 "FalconMambaForCausalLM": dict(hidden_size=32),
 "Mamba2ForCausalLM": dict(hidden_size=32, num_heads=8, head_dim=8, n_groups=2, state_size=8),
 # 8 heads: the default 8 kv heads divide them; the layers: the pattern's (no num_hidden_layers)
 "NemotronHForCausalLM": dict(hidden_size=32, hybrid_override_pattern="M*E-", num_attention_heads=8, head_dim=8,
     mamba_num_heads=8, mamba_head_dim=8, n_groups=2, ssm_state_size=8),
}
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_experts", "moe_intermediate_size")
def compare(arch, oracle, saved):
    bad = []
    given = TINY[arch]
    full = dict(oracle, **given, vocab_size=300, num_hidden_layers=2)
    if "intermediate_size" in oracle and oracle["intermediate_size"] != "expand*hidden": full["intermediate_size"] = 48
    for k in oracle:
        if k in SIZES or k in given: continue
        want = resolve(full, k)
        got = saved.get(k, "(absent)")
        if k == "sliding_window_pattern":   # sliding on layers i with (i + 1) % 6 != 0: all of a 2-layer model
            got = saved.get("sliding_window_pattern")
        if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
            same = got == want or abs(got - want) <= 1e-12 * abs(want)
        else:
            same = got == want
        if not same: bad.append(f"{k}: saved {got!r}, transformers {want!r}")
    return bad

for arch, o in ORACLE.items():
    d = os.path.join(W, "tiny-" + arch)
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": [arch], "vocab_size": 300, "num_hidden_layers": 2, **TINY[arch]}
    if "hybrid_override_pattern" in cfg: del cfg["num_hidden_layers"]
    if "intermediate_size" in o and o["intermediate_size"] != "expand*hidden": cfg["intermediate_size"] = 48
    json.dump(cfg, open(d + "/config.json", "w"))
    cmd = [B, "train", "--model", d, "--data", DATA, "--steps", "1", "--seq-len", "8", "--micro-batch", "1",
           "--threads", "1", "--summary", "false", "--plot", "false", "--out-dir", d + "-run", "--save", d + "-saved"]
    if INIT: cmd += INIT.split()
    r = run(cmd)
    if r.returncode != 0:
        check(False, f"{arch}: the tiny model trains (exit {r.returncode}): {(r.stdout + r.stderr)[-300:]}")
        continue
    saved = json.load(open(d + "-saved/config.json"))
    bad = compare(arch, o, saved)
    check(not bad, f"{arch}: the fields left out took transformers' defaults" + ("" if not bad else ": " + "; ".join(bad)))
    if arch == "MixtralForCausalLM":   # negative control: the engine's old defaults are caught
        old = dict(o, rope_theta=1e4, rms_norm_eps=1e-6)
        check(len(compare(arch, old, saved)) == 2, "negative control: Mixtral's old defaults (1e4, 1e-6) are reported")
    if arch == "MistralForCausalLM":
        old = dict(o, sliding_window=N, num_key_value_heads="heads")
        check(len(compare(arch, old, saved)) == 1, "negative control: Mistral without its default window is reported")
    if arch == "NemotronHForCausalLM":   # Mamba2Config's values where NemotronHConfig has its own
        old = dict(o, chunk_size=256, residual_in_fp32=True, initializer_range=0.1, bos_token_id=0)
        check(len(compare(arch, old, saved)) == 4,
              "negative control: Nemotron-H with Mamba-2's chunk_size, residual_in_fp32, initializer_range, "
              "bos_token_id is reported")

# ---- transformers 5's rope_parameters: the same model as rope_theta + rope_scaling -----------
losses = {}
for form, extra in (("v4", {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}),
                    ("v5", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8}})):
    d = os.path.join(W, "rope-" + form)
    os.makedirs(d, exist_ok=True)
    json.dump({"architectures": ["LlamaForCausalLM"], "vocab_size": 300, "num_hidden_layers": 2, "hidden_size": 32,
               "intermediate_size": 48, "num_attention_heads": 4, **extra}, open(d + "/config.json", "w"))
    cmd = [B, "train", "--model", d, "--data", DATA, "--steps", "2", "--seq-len", "16", "--micro-batch", "2",
           "--threads", "1", "--summary", "false", "--plot", "false", "--out-dir", d + "-run", "--save", d + "-saved"]
    if INIT: cmd += INIT.split()
    r = run(cmd)
    losses[form] = [json.loads(l)["loss"] for l in open(d + "-run/metrics.jsonl") if '"loss"' in l] if r.returncode == 0 else None
    if form == "v5" and r.returncode == 0:
        saved = json.load(open(d + "-saved/config.json"))
        check(saved["rope_theta"] == 500000.0 and saved["rope_scaling"]["rope_type"] == "llama3",
              "rope_parameters (transformers 5): theta 5e5 and llama3 scaling reach the model")
check(losses["v4"] is not None and losses["v4"] == losses["v5"],
      f"rope_parameters trains bit for bit as rope_theta + rope_scaling: {losses['v4']} vs {losses['v5']}")
print(f"{passes} passed, {fails} failed")
sys.exit(1 if fails else 0)
P
