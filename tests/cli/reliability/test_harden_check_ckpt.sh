#!/bin/bash
# tests/cli/reliability/test_harden_check_ckpt.sh — issue 11 case 8: the checkpoint manifest
# records the canonical model config and its hash; --resume and
# `convert --from-ckpt` refuse a checkpoint of a different model with the
# same tensor shapes (heads 4 vs heads 8 at the same width; rope_theta) with
# exit 2 naming the field. The same model resumes and converts; a manifest
# without the field (older versions) is accepted with a warning.
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_ckpt
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
cfg() { # DIR heads kv head_dim rope_theta
  tiny_config "$1" "\"num_attention_heads\": $2, \"num_key_value_heads\": $3, \"head_dim\": $4, \"rope_theta\": $5"
}
cfg "$W/h4" 4 2 8 10000.0
cfg "$W/h8" 8 4 4 10000.0       # the same tensor shapes: q (32, 32), k/v (16, 32)
cfg "$W/rope" 4 2 8 500000.0
tiny_data "$W/data"
RUN="$B train --init random --data $W/data --micro-batch 1 --seq-len 8 --threads 1 --summary false --plot false --out-dir $W/out"
check() { expect "$@"; }
check "write a heads-4 checkpoint" 0 "" $RUN --model "$W/h4" --steps 2 --ckpt-dir "$W/ck"
if grep -q '"model_hash"' "$W"/ck/step-*/manifest.json && grep -q 'model.num_attention_heads=4' "$W"/ck/step-*/manifest.json
then ok "manifest records model_config and model_hash"; else no "manifest lacks model_config / model_hash"; fi
check "resume with heads 8 (same shapes)" 2 "model.head_dim is 8 there but 4" $RUN --model "$W/h8" --steps 3 --ckpt-dir "$W/ck" --resume
check "resume with another rope_theta" 2 "model.rope_theta" $RUN --model "$W/rope" --steps 3 --ckpt-dir "$W/ck" --resume
check "resume with the same model" 0 "resumed from" $RUN --model "$W/h4" --steps 3 --ckpt-dir "$W/ck" --resume
check "convert --from-ckpt with heads 8" 2 "model.head_dim is 8 there but 4" "$B" convert --from-ckpt "$W/ck" --model-config "$W/h8" --to-hf "$W/hf8"
[ -e "$W/hf8" ] && no "the refused convert left $W/hf8"
check "convert --from-ckpt with the same model" 0 "wrote" "$B" convert --from-ckpt "$W/ck" --model-config "$W/h4" --to-hf "$W/hf4"
# convert --from-hf --to-ckpt records the config too: resuming it with heads 8 is refused
check "convert --from-hf --to-ckpt" 0 "" "$B" convert --from-hf "$W/hf4" --to-ckpt "$W/ck2"
check "resume a converted checkpoint with heads 8" 2 "model.head_dim is 8 there but 4" $RUN --model "$W/h8" --steps 1 --ckpt-dir "$W/ck2" --resume
# an older manifest without model_config: accepted with a warning
cp -r "$W/ck" "$W/old"
for m in "$W"/old/step-*/manifest.json; do
  "$PY" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d.pop("model_config"); d.pop("model_hash"); json.dump(d, open(p,"w"), indent=1)' "$m"
  "$SL_BUILD/tests/test_ckpt_io" --xxh64 "$m" > "$m.xxh64" || { echo "FAIL no test_ckpt_io --xxh64 helper"; exit 1; }
done
check "older manifest: accepted with a warning" 0 "records no model config" $RUN --model "$W/h4" --steps 4 --ckpt-dir "$W/old" --resume
finish
