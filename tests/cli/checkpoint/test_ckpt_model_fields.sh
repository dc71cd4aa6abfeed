#!/usr/bin/env bash
# A checkpoint, a converted checkpoint or a rank with a different model is
# refused whatever field differs (issue 43 item 2): the agreement text is
# every field the config reader takes (formats/hfconfig.c records each read;
# tests/unit/formats/test_cfg_fields.c shows a made-up field reaching it).
# The fields the old hand list missed: Mixtral's num_experts_per_tok,
# Qwen3-MoE's norm_topk_prob, Gemma 2's attn_logit_softcapping /
# final_logit_softcapping / query_pre_attn_scalar, Gemma 3's
# rope_local_base_freq and sliding_window_pattern, YaRN's attention_factor /
# mscale. Each: train with a checkpoint, change only that field in
# config.json, then --resume and convert --from-ckpt must exit 2 naming it;
# two ranks whose config.json differ only there (same file size) must too.
# The negative control: resuming with the config.json the run itself saved
# (--save: every field written out) is accepted, and so is the unchanged one.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_model_fields mpi
tiny_data "$W/data" 20000
T="--data $W/data --seq-len 16 --micro-batch 2 --threads 1 --summary false --plot false --log-every 100"
ARCH_INIT="--init random"
# model NAME JSON-MEMBERS: $W/NAME/config.json, a tiny model of that family
model() {
  mkdir -p "$W/$1"
  echo "{$2}" > "$W/$1/config.json"
}
L='"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "vocab_size": 300, "num_attention_heads": 4, "num_key_value_heads": 2'
model mixtral "\"architectures\": [\"MixtralForCausalLM\"], $L, \"num_local_experts\": 4, \"num_experts_per_tok\": 2"
model qwen3moe "\"architectures\": [\"Qwen3MoeForCausalLM\"], $L, \"head_dim\": 8, \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, \"norm_topk_prob\": true"
model gemma2 "\"architectures\": [\"Gemma2ForCausalLM\"], $L, \"head_dim\": 8, \"sliding_window\": 8, \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0, \"query_pre_attn_scalar\": 8"
model gemma3 "\"architectures\": [\"Gemma3ForCausalLM\"], $L, \"head_dim\": 8, \"sliding_window\": 8, \"rope_local_base_freq\": 10000.0, \"sliding_window_pattern\": 2"
model yarn "\"architectures\": [\"LlamaForCausalLM\"], $L, \"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 16, \"attention_factor\": 1.2}"
model yarnm "\"architectures\": [\"LlamaForCausalLM\"], $L, \"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 16, \"mscale\": 0.707, \"mscale_all_dim\": 1.0}"

for m in mixtral qwen3moe gemma2 gemma3 yarn yarnm; do
  "$B" train --model "$W/$m" $T $ARCH_INIT --steps 2 --ckpt-dir "$W/$m-ck" --ckpt-every 2 --out-dir "$W/$m-run" \
    --save "$W/$m-saved" > "$W/$m.log" 2>&1 || { bad "train $m"; tail -3 "$W/$m.log"; }
done

# change FIELD of MODEL's config.json (python: old text -> new text, same length where the rank case needs it)
changed() { # NAME MODEL OLD NEW -> $W/NAME/config.json
  mkdir -p "$W/$1"
  sed "s|$3|$4|" "$W/$2/config.json" > "$W/$1/config.json"
  cmp -s "$W/$2/config.json" "$W/$1/config.json" && echo "changed $1: '$3' not found" >&2
}
refused() { # NAME MODEL(the checkpoint's) OLD NEW KEY
  local n=$1 m=$2 key=$5
  changed "$n" "$m" "$3" "$4"
  "$B" train --model "$W/$n" $T --steps 4 --ckpt-dir "$W/$m-ck" --resume --out-dir "$W/$n-res" > "$W/$n-res.log" 2>&1
  rc_is "--resume with $key changed" $? 2 "$W/$n-res.log" "$key is"
  "$B" convert --from-ckpt "$W/$m-ck" --model-config "$W/$n" --to-hf "$W/$n-hf" > "$W/$n-conv.log" 2>&1
  rc_is "convert --from-ckpt with $key changed" $? 2 "$W/$n-conv.log" "$key is"
  [ ! -e "$W/$n-hf/model.safetensors" ] && ok "no model written by the refused convert" || bad "the refused convert wrote $W/$n-hf"
}
refused mix-k mixtral '"num_experts_per_tok": 2' '"num_experts_per_tok": 1' model.num_experts_per_tok
refused q3-norm qwen3moe '"norm_topk_prob": true' '"norm_topk_prob": false' model.norm_topk_prob
refused g2-acap gemma2 '"attn_logit_softcapping": 50.0' '"attn_logit_softcapping": 20.0' model.attn_logit_softcapping
refused g2-fcap gemma2 '"final_logit_softcapping": 30.0' '"final_logit_softcapping": 10.0' model.final_logit_softcapping
refused g2-qpas gemma2 '"query_pre_attn_scalar": 8' '"query_pre_attn_scalar": 4' model.query_pre_attn_scalar
refused g3-local gemma3 '"rope_local_base_freq": 10000.0' '"rope_local_base_freq": 20000.0' model.rope_local_base_freq
refused g3-pat gemma3 '"sliding_window_pattern": 2' '"sliding_window_pattern": 3' model.layer_types
refused yarn-af yarn '"attention_factor": 1.2' '"attention_factor": 1.5' model.rope_scaling.attention_factor
refused yarn-ms yarnm '"mscale": 0.707' '"mscale": 0.800' model.rope_scaling.attention_factor

# the negative control: the same model (unchanged, or as --save wrote it) resumes
for m in mixtral gemma3 yarnm; do
  for src in "$W/$m" "$W/$m-saved"; do
    "$B" train --model "$src" $T --steps 4 --ckpt-dir "$W/$m-ck" --resume --out-dir "$W/$m-ok" > "$W/$m-ok.log" 2>&1
    rc_is "$m: resume with $(basename "$src")/config.json accepted" $? 0 "$W/$m-ok.log" "resum"
    rm -rf "$W/$m-ck/step-000004"
  done
done

# two ranks, config.json differing only in num_experts_per_tok (the same size: the file list cannot tell)
cat > "$W/wrap.sh" << S
#!/bin/bash
cd "$W/case/r\$OMPI_COMM_WORLD_RANK" && exec "\$@"
S
chmod +x "$W/wrap.sh"
mkdir -p "$W/case/r0/model" "$W/case/r1/model"
cp "$W/mixtral/config.json" "$W/case/r0/model/"
cp "$W/mix-k/config.json" "$W/case/r1/model/"
[ "$(stat -c %s "$W/case/r0/model/config.json")" = "$(stat -c %s "$W/case/r1/model/config.json")" ] &&
  ok "the two ranks' config.json have the same size" || bad "config.json sizes differ (the case would not test the text)"
timeout 120 $MPI -np 2 "$W/wrap.sh" "$B" train --model model $T $ARCH_INIT --steps 2 > "$W/ranks.log" 2>&1
rc_is "ranks whose config.json differ only in num_experts_per_tok" $? 2 "$W/ranks.log" "model.num_experts_per_tok"
cp "$W/mixtral/config.json" "$W/case/r1/model/"
timeout 120 $MPI -np 2 "$W/wrap.sh" "$B" train --model model $T $ARCH_INIT --steps 2 > "$W/ranks-same.log" 2>&1
rc_is "ranks with the same config.json train" $? 0 "$W/ranks-same.log" "trained 2 steps"
finish
