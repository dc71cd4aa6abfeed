#!/bin/bash
# tests/cli/reliability/test_harden_check_inputs.sh — issue 11 case 11: inputs that were
# accepted silently. Extra tensors in the weight files the model does not use
# (a bias): a warning naming them, the run trains; a whole extra layer: exit 2
# naming num_hidden_layers; --seq-len above max_position_embeddings: exit 2
# unless --allow-long-context; a dataset shorter than one sample: a warning
# that samples wrap, the run trains.
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_inputs
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
check() { # WANT NEEDLE TRAIN-ARGS...: a one-step training run, named by $CASE
  local want=$1 needle=$2; shift 2
  expect "$CASE" "$want" "$needle" "$B" train --data "$W/data" --steps 1 --micro-batch 1 --threads 1 \
    --summary false --plot false --out-dir "$W/out" "$@"
}
tiny_config "$W/m" '"rope_theta": 10000.0, "max_position_embeddings": 32'
tiny_data "$W/data"
timeout 60 "$B" train --model "$W/m" --init random --data "$W/data" --steps 1 --micro-batch 1 --seq-len 8 --threads 1 \
  --summary false --plot false --out-dir "$W/out" --save "$W/saved" > "$W/save.log" 2>&1 || { echo "FAIL save"; exit 1; }
# add_tensors SRC DST NAME...: copies a safetensors file with extra F32 (4) tensors
add_tensors() {
  "$PY" - "$@" <<'P'
import json, struct, sys
src, dst, names = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
end = len(data)
for nm in names:
    h[nm] = {"dtype": "F32", "shape": [4], "data_offsets": [end, end + 16]}
    data += struct.pack("<4f", 0.5, 0.5, 0.5, 0.5); end += 16
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
P
}
mkdir -p "$W/bias" "$W/layer"
cp "$W/m/config.json" "$W/bias/"; cp "$W/m/config.json" "$W/layer/"
add_tensors "$W/saved/model.safetensors" "$W/bias/model.safetensors" model.layers.0.mlp.down_proj.bias
add_tensors "$W/saved/model.safetensors" "$W/layer/model.safetensors" model.layers.1.mlp.down_proj.weight \
  model.layers.1.input_layernorm.weight
CASE="control: saved weights load" check 0 "" --model "$W/saved" --seq-len 8
CASE="extra bias: warning naming it" check 0 "model.layers.0.mlp.down_proj.bias" --model "$W/bias" --seq-len 8
CASE="extra layer: error naming num_hidden_layers" check 2 "num_hidden_layers" --model "$W/layer" --seq-len 8
CASE="seq-len above max_position_embeddings" check 2 "max_position_embeddings 32" --model "$W/m" --init random --seq-len 64
CASE="seq-len above max_position_embeddings, --allow-long-context" check 0 "" --model "$W/m" --init random --seq-len 64 --allow-long-context
CASE="seq-len at max_position_embeddings" check 0 "" --model "$W/m" --init random --seq-len 32
# a dataset shorter than one sample: a warning, the run trains
printf 'tiny text\n' > "$W/short.txt"
"$B" prepare --input "$W/short.txt" --output "$W/short" > /dev/null || exit 1
k=$((k + 1))
timeout 60 "$B" train --model "$W/m" --init random --data "$W/short" --steps 1 --micro-batch 1 --seq-len 16 --threads 1 \
  --summary false --plot false --out-dir "$W/out" > "$W/o$k" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "fewer than one sample.*wraps" "$W/o$k"; then ok "short dataset: wrap warning"
else no "short dataset: exit $rc" "$W/o$k"; fi
finish
