#!/usr/bin/env bash
# rope_scaling (issue 24): `shardlm plan` takes the published Llama 3.1 /
# 3.2 / 3.3 configs (tests/fixtures/hf-configs, transcribed) with their
# exact parameter counts; the refusals (dynamic, an unknown type, a missing
# factor) exit 2 naming the file and the field; a tiny llama3-scaled Llama
# trains 2 steps and saves its rope_scaling back. The tables themselves are
# tests/unit/models/test_rope.c; against PyTorch: tests/ref/test_torch_rope.sh.
source "${SL_SRC:?}/tests/lib/run.sh" rope_scaling
F=$SL_SRC/tests/fixtures/hf-configs

for m in Llama-3.1-8B:8030261248 Llama-3.2-1B:1235814400 Llama-3.2-3B:3212749824 \
  Llama-3.3-70B-Instruct:70553706496; do
  name=${m%%:*} want=${m##*:}
  "$B" plan --model "$F/$name" > "$W/plan-$name.log" 2>&1
  rc_is "plan $name" $? 0 "$W/plan-$name.log" "model: $want parameters"
done

refuse() { # name json-members needle
  tiny_model "$W/$1" llama "$2"
  "$B" plan --model "$W/$1" > "$W/$1.log" 2>&1
  rc_is "refused: $1" $? 2 "$W/$1.log" "$3"
  grep -qF "$W/$1/config.json" "$W/$1.log" || bad "$1: the message does not name the file"
}
refuse dynamic '"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}' \
  "'rope_scaling.rope_type' = \"dynamic\" is not supported: dynamic NTK scaling changes the frequencies"
refuse unknown '"rope_scaling": {"type": "su", "factor": 2.0}' "'rope_scaling.type' = \"su\" is not supported"
refuse nofactor '"rope_scaling": {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}' \
  "missing required field 'rope_scaling.factor'"

# a tiny llama3-scaled model (head_dim 16, original 64: all three bands) trains
tiny_data "$W/data"
tiny_model "$W/l3" llama '"num_hidden_layers": 2, "head_dim": 16, "max_position_embeddings": 512, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "rope_type": "llama3"}'
"$B" train --model "$W/l3" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/l3run" --save "$W/l3run/model" > "$W/l3.log" 2>&1
rc_is "train llama3-scaled 2 steps" $? 0 "$W/l3.log" "trained 2 steps"
"$PY" - "$W/l3run/model/config.json" << 'P' && ok "saved config keeps rope_scaling" || bad "saved config lost rope_scaling"
import json, sys
r = json.load(open(sys.argv[1]))["rope_scaling"]
assert r == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 64}, r
P
# the scaling is used: the same model without it gives another loss
tiny_model "$W/l3off" llama '"num_hidden_layers": 2, "head_dim": 16, "max_position_embeddings": 512'
"$B" train --model "$W/l3off" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/l3offrun" > "$W/l3off.log" 2>&1
a=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/l3.log") b=$(grep -o 'loss [0-9.]* -> [0-9.]*' "$W/l3off.log")
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && ok "rope_scaling changes the run ($a vs $b unscaled)" \
  || bad "rope_scaling does not change the run ('$a' vs '$b')"
# a checkpoint records the rule: resuming it with the scaling removed is refused
"$B" train --model "$W/l3" --init random --data "$W/data" --steps 2 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/ck" --ckpt-dir "$W/ck/ckpt" --ckpt-every 2 > "$W/ck.log" 2>&1
rc_is "train llama3-scaled with a checkpoint" $? 0 "$W/ck.log"
"$B" train --model "$W/l3off" --init random --data "$W/data" --steps 4 --seq-len 32 --micro-batch 2 --threads 1 --summary false \
  --plot false --out-dir "$W/ck2" --ckpt-dir "$W/ck/ckpt" --resume > "$W/ck2.log" 2>&1
rc_is "resume without the rope_scaling refused" $? 2 "$W/ck2.log" "model.rope_scaling is llama3 there but default"
finish
