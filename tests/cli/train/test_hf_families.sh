#!/usr/bin/env bash
# Model families (issue 24): `shardlm plan` takes the published Qwen2.5
# configs (tests/fixtures/hf-configs, transcribed) with their exact
# parameter counts (q/k/v biases included); use_sliding_window / use_mrope
# true are refused naming the file and the field; a tiny Qwen2 trains 2
# steps and saves a config.json transformers loads as Qwen2 with the q/k/v
# biases in its weights. Against PyTorch: tests/ref/test_torch_qwen2.sh.
# Qwen3 the same way (the five published Qwen3 configs' exact counts with
# the q/k norms and head_dim 128; use_sliding_window and a sliding
# layer_types entry refused; a tiny Qwen3 trains, saves q_norm / k_norm,
# and its checkpoint converts --to-hf alike); Llama's attention_bias /
# mlp_bias accepted with their counts. Against PyTorch:
# tests/ref/test_torch_qwen3.sh.
# The published Gemma 2 configs plan with their exact counts (four norms a
# layer, tied embeddings), gemma-3-1b-pt likewise (and the q/k norms); a
# multimodal Gemma 3 config is refused by name, naming the file, and so are
# Gemma 3's attention softcap, bidirectional attention, a non-periodic
# layer_types, YaRN rope_scaling and bf16 compute. Against PyTorch:
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

Q='"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 2'
Q3='"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "head_dim": 12'
refuse() { # name json-members needle [model prefix]
  tiny_model "$W/$1" llama "${4:-$Q}, $2"
  "$B" plan --model "$W/$1" > "$W/$1.log" 2>&1
  rc_is "refused: $1" $? 2 "$W/$1.log" "$3"
  grep -qF "$W/$1/config.json" "$W/$1.log" || bad "$1: the message does not name the file"
}
refuse sliding '"use_sliding_window": true, "sliding_window": 8' "field 'use_sliding_window' = true is not supported"
refuse mrope '"use_mrope": true' "field 'use_mrope' = true is not supported"
refuse q3sliding '"use_sliding_window": true, "sliding_window": 8' "field 'use_sliding_window' = true is not supported" "$Q3"
refuse q3types '"layer_types": ["full_attention", "sliding_attention"]' \
  "field 'layer_types'[1] = \"sliding_attention\" is not supported" "$Q3"
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
"$B" train --model "$W/q2" --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/q2run" --save "$W/q2run/model" > "$W/q2.log" 2>&1
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
"$B" train --model "$W/q3" --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
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
# Gemma 2 under bf16 compute: refused until a bf16 reference checks it
tiny_model "$W/g2" tied '"architectures": ["Gemma2ForCausalLM"], "num_hidden_layers": 2, "head_dim": 8'
"$B" train --model "$W/g2" --data "$W/data" --steps 1 --seq-len 16 --micro-batch 2 --threads 1 --compute-dtype bf16 \
  --summary false --plot false --out-dir "$W/g2run" > "$W/g2.log" 2>&1
rc_is "refused: Gemma 2 --compute-dtype bf16" $? 2 "$W/g2.log" "--compute-dtype bf16: not supported for Gemma2ForCausalLM"
tiny_model "$W/g3" tied "$G3"
"$B" train --model "$W/g3" --data "$W/data" --steps 1 --seq-len 16 --micro-batch 2 --threads 1 --compute-dtype bf16 \
  --summary false --plot false --out-dir "$W/g3run" > "$W/g3.log" 2>&1
rc_is "refused: Gemma 3 --compute-dtype bf16" $? 2 "$W/g3.log" "--compute-dtype bf16: not supported for Gemma3ForCausalLM"
# the biases train: the same model as Llama (no biases) gives another loss
tiny_model "$W/l2" llama '"num_hidden_layers": 2'
"$B" train --model "$W/l2" --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/l2run" > "$W/l2.log" 2>&1
a=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/q2.log") b=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/l2.log")
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && ok "the q/k/v biases change the run ($a vs $b without)" \
  || bad "the q/k/v biases do not change the run ('$a' vs '$b')"
finish
