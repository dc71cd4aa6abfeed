#!/usr/bin/env bash
# Model families (issues 24, 25): `shardlm plan` takes the published Qwen2.5, Mixtral and Qwen3-MoE
# configs (tests/fixtures/hf-configs, transcribed) with their exact
# parameter counts (q/k/v biases included); use_mrope true, a zero
# sliding_window under use_sliding_window and a bad layer_types entry are
# refused naming the file and the field; a tiny Qwen2 trains 2
# steps and saves a config.json transformers loads as Qwen2 with the q/k/v
# biases in its weights. Against PyTorch: tests/ref/test_torch_qwen2.sh.
# Qwen3 the same way (the five published Qwen3 configs' exact counts with
# the q/k norms and head_dim 128; a sliding layer_types entry without a
# window refused; a tiny Qwen3 trains, saves q_norm / k_norm,
# and its checkpoint converts --to-hf alike); Llama's attention_bias /
# mlp_bias accepted with their counts. Against PyTorch:
# tests/ref/test_torch_qwen3.sh.
# Falcon-Mamba: the published falcon-mamba-7b config's count (derived by
# hand from its tensor shapes: tests/fixtures/hf-configs/README.md), a
# non-positive mixer_rms_eps refused by name, a tiny one trains 2 steps and
# saves FalconMambaForCausalLM with mixer_rms_eps and the Mamba tensor names;
# its dt/B/C norms change the run (vs the same config as plain Mamba), and
# its checkpoint does not resume as plain Mamba.
# Against PyTorch: tests/ref/test_torch_falcon_mamba.sh.
# Nemotron-H: the published Nemotron-H-8B-Base-8K and Nemotron 3 Nano 30B-A3B
# configs' counts (derived by hand from their tensor shapes); its E layers'
# unbuilt options (latent MoE, group-limited routing, two shared experts, a
# non-positive routed_scaling_factor, the z-loss) refused by name. Against
# PyTorch: tests/ref/test_torch_nemotron_h.sh.
# The published Gemma 2 configs plan with their exact counts (four norms a
# layer, tied embeddings), gemma-3-1b-pt likewise (and the q/k norms); a
# multimodal Gemma 3 config is refused by name, naming the file, and so are
# Gemma 3's attention softcap, bidirectional attention, a non-periodic
# layer_types and YaRN rope_scaling; both train 2 steps under bf16
# compute. Against PyTorch:
# tests/ref/test_torch_gemma2.sh, tests/ref/test_torch_gemma3.sh.
source "${SL_SRC:?}/tests/lib/run.sh" hf_families
F=$SL_SRC/tests/fixtures/hf-configs

for m in Qwen3-0.6B:596049920 Qwen3-1.7B:1720574976 Qwen3-4B:4022468096 Qwen3-8B:8190735360 \
  Qwen3-14B:14768307200 Qwen2.5-0.5B:494032768 Qwen2.5-1.5B:1543714304 Qwen2.5-3B:3085938688 Qwen2.5-7B:7615616512 \
  Qwen2.5-14B:14770033664 Qwen2.5-32B:32763876352 gemma-2-2b:2614341888 gemma-2-9b:9241705984 \
  gemma-2-27b:27227128320 gemma-3-1b-pt:999885952; do
  name=${m%%:*} want=${m##*:}
  "$B" plan --model "$F/$name" > "$W/plan-$name.log" 2>&1
  rc_is "plan $name" $? 0 "$W/plan-$name.log" "model: $want parameters"
done

train2() { # NAME [ARGS]: 2 steps of the model $W/NAME, log $W/NAME.log
  local n=$1
  shift
  "$B" train --model "$W/$n" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
    --plot false --out-dir "$W/${n}run" "$@" > "$W/$n.log" 2>&1
}
changes_run() { # WITH WITHOUT WHAT: the two runs' losses differ
  local a b
  a=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/$1.log") b=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/$2.log")
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && ok "$3 change the run ($a vs $b without)" \
    || bad "$3 do not change the run ('$a' vs '$b')"
}

Q='"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 2'
Q3='"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "head_dim": 12'
refuse() { # name json-members needle [model prefix]
  tiny_model "$W/$1" llama "${4:-$Q}, $2"
  "$B" plan --model "$W/$1" > "$W/$1.log" 2>&1
  rc_is "refused: $1" $? 2 "$W/$1.log" "$3"
  grep -qF "$W/$1/config.json" "$W/$1.log" || bad "$1: the message does not name the file"
}
refuse sliding '"use_sliding_window": true, "sliding_window": 0' \
  "field 'sliding_window' must be positive or null with use_sliding_window, found 0"
refuse mrope '"use_mrope": true' "field 'use_mrope' = true is not supported"
refuse q2types '"use_sliding_window": true, "layer_types": ["full_attention", "chunked_attention"]' \
  "field 'layer_types'[1] = \"chunked_attention\" is not supported"
refuse q3types '"layer_types": ["full_attention", "sliding_attention"]' \
  "field 'layer_types'[1] is \"sliding_attention\" but no window is set" "$Q3"
refuse q3typenum '"layer_types": [1, 2]' "field 'layer_types'[0] must be a string, found an integer" "$Q3"
# Llama's attention_bias / mlp_bias: every bias counted (2 layers: q/k/v 32+16+16, o 32; gate/up 64+64, down 32)
tiny_model "$W/lb" llama '"num_hidden_layers": 2, "attention_bias": true, "mlp_bias": true'
tiny_model "$W/l0" llama '"num_hidden_layers": 2'
"$B" plan --model "$W/lb" > "$W/lb.log" 2>&1
"$B" plan --model "$W/l0" > "$W/l0.log" 2>&1
a=$(grep -o 'model: [0-9]*' "$W/lb.log" | grep -o '[0-9]*') b=$(grep -o 'model: [0-9]*' "$W/l0.log" | grep -o '[0-9]*')
[ -n "$a" ] && [ -n "$b" ] && [ $((a - b)) -eq $((2 * (32 + 16 + 16 + 32 + 64 + 64 + 32))) ] &&
  ok "Llama attention_bias + mlp_bias: $a parameters = $b + 2 x 256 biases" || bad "Llama biases counted wrong ($a vs $b)"

# Gemma 3: a multimodal config refused with the way to its text model
gemma_refused() { # dir needle
  local name rc
  name=$(basename "$1")
  "$B" plan --model "$1" > "$W/gemma.log" 2>&1
  rc=$?
  rc_is "refused: $name" $rc 2 "$W/gemma.log" "$2"
  grep -qF "$1/config.json" "$W/gemma.log" || bad "$(basename "$1"): the message does not name the file"
}
mkdir -p "$W/g3mm"
echo '{"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": {"hidden_size": 2560}}' \
  > "$W/g3mm/config.json"
gemma_refused "$W/g3mm" "export the language model as a Gemma3ForCausalLM checkpoint"
G3='"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "head_dim": 8'
refuse g3cap '"attn_logit_softcapping": 50.0' "field 'attn_logit_softcapping' = 50 is not supported for Gemma 3" "$G3"
refuse g3bidi '"use_bidirectional_attention": true' "field 'use_bidirectional_attention' = true is not supported" "$G3"
refuse g3types '"layer_types": ["sliding_attention", "full_attention", "full_attention"]' \
  "field 'layer_types[2]' is not \"sliding_attention\"" "$G3"
refuse g3pat '"sliding_window_pattern": 3, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]' \
  "field 'layer_types' has its first full_attention layer at 1 (expected 2" "$G3"
refuse g3yarn '"rope_scaling": {"rope_type": "yarn", "factor": 4.0}' "field 'rope_scaling' of type yarn is not supported for Gemma 3" "$G3"

# a tiny Qwen2 (the published configs' fields that change nothing accepted) trains and saves
tiny_data "$W/data"
tiny_model "$W/q2" llama "$Q, \"use_sliding_window\": false, \"sliding_window\": 4096, \"max_window_layers\": 2, \"use_mrope\": false, \"attention_dropout\": 0.0, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.1\", \"use_cache\": true"
train2 q2 --save "$W/q2run/model"
rc_is "train tiny Qwen2 2 steps" $? 0 "$W/q2.log" "trained 2 steps"
"$PY" - "$W/q2run/model" << 'P' && ok "saved: Qwen2 config, q/k/v biases in the weights" || bad "saved Qwen2 model wrong"
import json, struct, sys, glob
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["Qwen2ForCausalLM"] and c["model_type"] == "qwen2", c
assert c["use_sliding_window"] is False and "attention_bias" not in c, c
names = set()
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    names |= set(json.loads(b[8:8 + n]))
for l in range(2):
    for p in "qkv":
        assert f"model.layers.{l}.self_attn.{p}_proj.bias" in names, (l, p, sorted(names))
    assert f"model.layers.{l}.self_attn.o_proj.bias" not in names
P
# a tiny Qwen3 (published fields that change nothing accepted, layer_types all full) trains, saves, converts
tiny_model "$W/q3" llama "$Q3, \"tie_word_embeddings\": true, \"attention_bias\": false, \"use_sliding_window\": false, \"sliding_window\": null, \"max_window_layers\": 28, \"layer_types\": [\"full_attention\", \"full_attention\"], \"attention_dropout\": 0.0, \"rope_scaling\": null, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true"
"$B" train --model "$W/q3" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/q3run" --save "$W/q3run/model" --ckpt-dir "$W/q3ck" > "$W/q3.log" 2>&1
rc_is "train tiny Qwen3 2 steps" $? 0 "$W/q3.log" "trained 2 steps"
"$B" convert --from-ckpt "$W/q3ck" --model-config "$W/q3" --to-hf "$W/q3conv" > "$W/q3conv.log" 2>&1
rc_is "convert the Qwen3 checkpoint --to-hf" $? 0 "$W/q3conv.log"
for d in q3run/model q3conv; do
"$PY" - "$W/$d" << 'P' && ok "$d: Qwen3 config (head_dim 12), q_norm / k_norm in the weights" || bad "$d: Qwen3 model wrong"
import json, struct, sys, glob
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3", c
assert c["head_dim"] == 12 and c["attention_bias"] is False and c["tie_word_embeddings"] is True, c
names = {}
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    names.update(json.loads(b[8:8 + n]))
for l in range(2):
    for p in "qk":
        assert names[f"model.layers.{l}.self_attn.{p}_norm.weight"]["shape"] == [12], (l, p, sorted(names))
assert not any(n.endswith(".bias") for n in names) and "lm_head.weight" not in names, sorted(names)
P
done
# Gemma 2 and 3 under bf16 compute train (tests/ref/test_torch_bf16.sh checks them against the bf16 mirror)
tiny_model "$W/g2" tied '"architectures": ["Gemma2ForCausalLM"], "num_hidden_layers": 2, "head_dim": 8'
tiny_model "$W/g3" tied "$G3"
for g in g2 g3; do
  "$B" train --model "$W/$g" --init random --data "$W/data" --steps 2 --seq-len 16 --micro-batch 2 --threads 1 --compute-dtype bf16 \
    --summary false --plot false --out-dir "$W/${g}run" > "$W/$g.log" 2>&1
  rc_is "$g --compute-dtype bf16 trains" $? 0 "$W/$g.log" "trained 2 steps"
done
# the biases train: the same model as Llama (no biases) gives another loss
tiny_model "$W/l2" llama '"num_hidden_layers": 2'
train2 l2
changes_run q2 l2 "the q/k/v biases"

# ---- Nemotron-H: the published 8B config (attention_head_dim, the 52-layer pattern, Python's Infinity), its count
# derived by hand from the tensor shapes (tests/fixtures/hf-configs/README.md)
"$B" plan --model "$F/Nemotron-H-8B-Base-8K" > "$W/plan-nemotron.log" 2>&1
rc_is "plan Nemotron-H-8B-Base-8K" $? 0 "$W/plan-nemotron.log" "model: 8100852736 parameters"
# Nemotron 3 Nano 30B-A3B (the 'E' layers: 128 routed relu^2 experts, top 6, a shared expert), its count derived
# by hand likewise (the parameters; the 23 routers' e_score_correction_bias buffers, 2,944 floats, are not)
"$B" plan --model "$F/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" > "$W/plan-nano.log" 2>&1
rc_is "plan NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" $? 0 "$W/plan-nano.log" "model: 31577937344 parameters"
grep -q "mixture of experts: 3580073408 parameters active a token" "$W/plan-nano.log"
rc_is "plan NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: active parameters (6 of 128 experts)" $? 0 "$W/plan-nano.log"
# what its MoE layers do not build yet is refused by name, naming the field (exit 2)
NE='"architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "M*E", "num_hidden_layers": null,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8,
 "n_groups": 2, "ssm_state_size": 8, "state_size": null, "expand": null, "time_step_rank": null,
 "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 24'
for c in 'moe_latent: "moe_latent_size": 16|moe_latent_size' 'groups: "n_group": 2, "topk_group": 1|topk_group' \
  'shared: "n_shared_experts": 2|n_shared_experts' 'scale: "routed_scaling_factor": 0|routed_scaling_factor'; do
  n=${c%%:*} rest=${c#*: } field=${c##*|}
  tiny_model "$W/ne-$n" mamba "$NE, ${rest%|*}"
  "$B" plan --model "$W/ne-$n" > "$W/ne-$n.log" 2>&1
  rc_is "Nemotron-H E layers: $field refused" $? 2 "$W/ne-$n.log" "'$field'"
done
tiny_model "$W/ne-ok" mamba "$NE"
"$B" train --model "$W/ne-ok" --init random --steps 1 --seq-len 8 --micro-batch 1 --threads 1 --summary false \
  --plot false --out-dir "$W/ne-z" --moe-z-loss-coef 0.01 > "$W/ne-z.log" 2>&1
rc_is "Nemotron-H E layers: --moe-z-loss-coef refused (a sigmoid router)" $? 2 "$W/ne-z.log" "--moe-z-loss-coef"

# ---- Mamba-2: state-spaces/mamba2-2.7b (mamba_ssm's config: ssm_cfg layer Mamba2, the vocabulary padded to a
# multiple of 16), its count derived by hand from the tensor shapes (tests/fixtures/hf-configs/README.md)
"$B" plan --model "$F/mamba2-2.7b" > "$W/plan-mamba2.log" 2>&1
rc_is "plan mamba2-2.7b" $? 0 "$W/plan-mamba2.log" "model: 2702599680 parameters"
# its one B/C group is shared by the TP ranks: the search offers --tp 2 (2560 / 2 >= 1024 channels a rank; it
# offered no TP while it asked --tp to divide n_groups), and the engine check builds that layout
"$B" plan --model "$F/mamba2-2.7b" --gpus 8 --top 1000 --json > "$W/plan-mamba2.json" 2> "$W/plan-mamba2-tp.log"
"$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))["candidates"]; sys.exit(0 if any(x["tp"] == 2 for x in c) else 1)' \
  "$W/plan-mamba2.json" > /dev/null 2>&1
rc_is "plan mamba2-2.7b: the search offers --tp 2 (n_groups 1, shared)" $? 0 "$W/plan-mamba2-tp.log"
"$B" plan --engine-check --model "$F/mamba2-2.7b" --world 2 --tp 2 --zero 3 --seq-len 512 > "$W/plan-mamba2-ec.log" 2>&1
rc_is "plan --engine-check mamba2-2.7b --tp 2" $? 0 "$W/plan-mamba2-ec.log" "TP axis bytes per step"

# ---- Granite 4.0-H Tiny (7B-A1B: 64 fused SwiGLU experts top 6 beside each layer's shared MLP), its counts derived
# by hand from the tensor shapes (tests/fixtures/hf-configs/README.md)
"$B" plan --model "$F/granite-4.0-h-tiny" > "$W/plan-granite-tiny.log" 2>&1
rc_is "plan granite-4.0-h-tiny" $? 0 "$W/plan-granite-tiny.log" "model: 6939037248 parameters"
grep -q "mixture of experts: 1465470528 parameters active a token" "$W/plan-granite-tiny.log"
rc_is "plan granite-4.0-h-tiny: active parameters (6 of 64 experts)" $? 0 "$W/plan-granite-tiny.log"
# its experts' fields checked by name (exit 2)
for c in 'topk: "num_experts_per_tok": 5|num_experts_per_tok' 'width: "intermediate_size": 0|intermediate_size' \
  'aux: "router_aux_loss_coef": -1|router_aux_loss_coef' 'count: "num_local_experts": -2|num_local_experts'; do
  n=${c%%:*} rest=${c#*: } field=${c##*|}
  tiny_model "$W/gm-$n" granite_moe "${rest%|*}"
  "$B" plan --model "$W/gm-$n" > "$W/gm-$n.log" 2>&1
  rc_is "Granite 4.0-H experts: bad $field refused" $? 2 "$W/gm-$n.log" "'$field'"
done

# ---- Falcon-Mamba
"$B" plan --model "$F/falcon-mamba-7b" > "$W/plan-falcon.log" 2>&1
rc_is "plan falcon-mamba-7b" $? 0 "$W/plan-falcon.log" "model: 7272665088 parameters"
FM='"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "num_hidden_layers": 2, "tie_word_embeddings": false'
tiny_model "$W/fm-eps" mamba "$FM, \"mixer_rms_eps\": 0"
"$B" plan --model "$W/fm-eps" > "$W/fm-eps.log" 2>&1
rc_is "refused: mixer_rms_eps 0" $? 2 "$W/fm-eps.log" "field 'mixer_rms_eps' must be positive, found 0"
grep -qF "$W/fm-eps/config.json" "$W/fm-eps.log" || bad "fm-eps: the message does not name the file"
tiny_model "$W/fm" mamba "$FM, \"mixer_rms_eps\": 1e-5, \"use_mambapy\": false, \"pad_token_id\": 11, \"rescale_prenorm_residual\": false, \"time_step_init_scheme\": \"random\", \"torch_dtype\": \"bfloat16\", \"use_cache\": true"
train2 fm --save "$W/fmrun/model" --ckpt-dir "$W/fmck"
rc_is "train tiny Falcon-Mamba 2 steps" $? 0 "$W/fm.log" "trained 2 steps"
"$PY" - "$W/fmrun/model" "$SL_SRC/tests/ref" << 'P' && ok "saved: FalconMambaForCausalLM config (mixer_rms_eps), Mamba tensor names" || bad "saved Falcon-Mamba model wrong"
import glob, sys
sys.path.insert(0, sys.argv[2])
import common
c = common.config_read(sys.argv[1])
assert c["architectures"] == ["FalconMambaForCausalLM"] and c["model_type"] == "falcon_mamba", c
assert c["mixer_rms_eps"] == 1e-5 and c["tie_word_embeddings"] is False, c
names = {n for f in glob.glob(sys.argv[1] + "/*.safetensors") for n in common.st_read_header(f)[0]}
want = {"backbone.embeddings.weight", "backbone.norm_f.weight", "lm_head.weight"} | {
    f"backbone.layers.{l}.{t}" for l in range(2) for t in (
        "norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias", "mixer.x_proj.weight",
        "mixer.dt_proj.weight", "mixer.dt_proj.bias", "mixer.A_log", "mixer.D", "mixer.out_proj.weight")}
assert names == want, sorted(names ^ want)
P
tiny_model "$W/fm0" mamba "$FM, \"architectures\": [\"MambaForCausalLM\"], \"model_type\": \"mamba\""
train2 fm0
changes_run fm fm0 "the dt/B/C norms"
"$B" train --model "$W/fm0" --init random --data "$W/data" --steps 4 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/fm0res" --ckpt-dir "$W/fmck" --resume > "$W/fm0res.log" 2>&1
rc_is "refused: resuming the Falcon-Mamba checkpoint as plain Mamba" $? 2 "$W/fm0res.log" "model.family is FalconMambaForCausalLM there"

# Mixtral (mixture of experts): the published 8x7B config's exact counts, total and active a token
"$B" plan --model "$F/Mixtral-8x7B-v0.1" > "$W/plan-mixtral.log" 2>&1
rc_is "plan Mixtral-8x7B-v0.1" $? 0 "$W/plan-mixtral.log" "model: 46702792704 parameters"
grep -qF "mixture of experts: 12879925248 parameters active a token" "$W/plan-mixtral.log" \
  && ok "Mixtral-8x7B: 12879925248 active (2 of 8 experts a layer)" || bad "Mixtral-8x7B active count"
"$B" plan --model "$F/Qwen3-30B-A3B-Base" > "$W/plan-q3moe.log" 2>&1
rc_is "plan Qwen3-30B-A3B-Base" $? 0 "$W/plan-q3moe.log" "model: 30532122624 parameters"
grep -qF "mixture of experts: 3353032704 parameters active a token" "$W/plan-q3moe.log" \
  && ok "Qwen3-30B-A3B: 3353032704 active (8 of 128 experts a layer)" || bad "Qwen3-30B-A3B active count"
X='"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 4'
refuse jitter '"router_jitter_noise": 0.1' "field 'router_jitter_noise' = 0.1 is not supported" "$X"
refuse auxneg '"output_router_logits": true, "router_aux_loss_coef": -1' "field 'router_aux_loss_coef' must be >= 0" "$X"
refuse topk '"num_experts_per_tok": 5' "field 'num_experts_per_tok' must be in [1, min(64, num_local_experts = 4)]" "$X"
Q3M='"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16'
refuse q3mstep '"decoder_sparse_step": 2' "field 'decoder_sparse_step' = 2 is not supported" "$Q3M"
refuse q3mdense '"mlp_only_layers": [0]' "field 'mlp_only_layers' is not supported unless empty" "$Q3M"
refuse q3mwin '"use_sliding_window": true' "field 'use_sliding_window' = true is not supported" "$Q3M"
# a tiny Mixtral (the published config's fields that change nothing accepted) trains and saves
tiny_model "$W/mx" llama "$X, \"num_experts_per_tok\": 2, \"router_aux_loss_coef\": 0.02, \"output_router_logits\": false, \"router_jitter_noise\": 0.0, \"sliding_window\": null, \"attention_dropout\": 0.0, \"torch_dtype\": \"bfloat16\", \"use_cache\": true"
"$B" train --model "$W/mx" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/mxrun" --metrics "$W/mxrun/m.jsonl" --save "$W/mxrun/model" > "$W/mx.log" 2>&1
rc_is "train tiny Mixtral 2 steps" $? 0 "$W/mx.log" "trained 2 steps"
"$PY" - "$W/mxrun/model" "$W/mxrun/m.jsonl" "$SL_SRC/tests/ref" << 'P' && ok "saved: Mixtral config, router and expert tensors; moe_load in the metrics" || bad "saved Mixtral wrong"
import json, sys, glob
sys.path.insert(0, sys.argv[3])
import common
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["MixtralForCausalLM"] and c["num_local_experts"] == 4 and c["num_experts_per_tok"] == 2, c
names = set().union(*(common.st_read_header(f)[0] for f in glob.glob(sys.argv[1] + "/*.safetensors")))
for l in range(2):
    assert f"model.layers.{l}.block_sparse_moe.gate.weight" in names
    for e in range(4):
        for w in ("w1", "w2", "w3"):
            assert f"model.layers.{l}.block_sparse_moe.experts.{e}.{w}.weight" in names, (l, e, w)
    assert f"model.layers.{l}.mlp.gate_proj.weight" not in names
rows = [json.loads(x) for x in open(sys.argv[2]) if '"step"' in x]
for r in rows:  # 2 x 32 tokens, 2 choices each, in every layer
    assert len(r["moe_load"]) == 2 and all(sum(x) == 2 * 32 * 2 for x in r["moe_load"]), r["moe_load"]
    assert r["moe_max_over_mean"] >= 1.0
P
finish
