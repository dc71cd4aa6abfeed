#!/usr/bin/env bash
# Exports users ship (issue 41): `train --save` and `convert --to-hf` write
# the source model's dtype (--save-dtype auto): a bf16 model trained 3 steps
# saves BF16 tensors equal to the same run's fp32 save rounded to nearest
# even, config.json torch_dtype "bfloat16", and the source's tokenizer files
# and generation_config.json beside them, byte for byte; --save-dtype fp16
# writes F16 (numpy's rounding of the fp32 save); convert --to-hf from the
# run's checkpoint with --model-config on the bf16 directory writes the same
# file; an fp32 source (weights, or none and no torch_dtype) stays F32, a
# weightless config.json with torch_dtype bfloat16 saves BF16; a bad
# --save-dtype is refused by name (exit 2). Negative control: truncation
# instead of round-to-nearest-even differs from the saved bf16 values.
source "${SL_SRC:?}/tests/lib/run.sh" save_dtype numpy
tiny_model "$W/m" llama '"num_hidden_layers": 2, "max_position_embeddings": 64'
RUN="$B train --seq-len 16 --micro-batch 2 --data-order sequential --threads 1 --peak-tflops 1 --summary false
 --plot false --lr 1e-2"
run() { # NAME FLAGS...: a train run into $W/NAME, its log checked
  local n=$1
  shift
  $RUN --out-dir "$W/$n" "$@" > "$W/$n.log" 2>&1 || { bad "$n: train failed"; cat "$W/$n.log"; return 1; }
}
# an fp32 source without weights (no torch_dtype): F32 (also the bf16 model's weights, below)
run init --model "$W/m" --init random --steps 1 --save "$W/init"
# the bf16 model: those weights as BF16 safetensors, with tokenizer files and a generation config
mkdir -p "$W/bf"
cp "$W/m/config.json" "$W/bf/"
cp "$SL_SRC/tests/fixtures/tokenizer/synth_a.json" "$W/bf/tokenizer.json"
"$PY" - "$W/init" "$W/bf" "$SL_SRC/tests/ref" << 'P' || exit 1
import json, sys
sys.path.insert(0, sys.argv[3])
import common
w = common.st_read(sys.argv[1] + "/model.safetensors")
common.st_write(sys.argv[2] + "/model.safetensors", w, dtype="BF16")
json.dump({"bos_token": "[CLS]", "eos_token": "<mask>", "model_max_length": 64}, open(sys.argv[2] + "/tokenizer_config.json", "w"))
json.dump({"bos_token": "[CLS]", "eos_token": "<mask>"}, open(sys.argv[2] + "/special_tokens_map.json", "w"))
json.dump({"bos_token_id": 127, "eos_token_id": 128, "do_sample": True, "temperature": 0.7}, open(sys.argv[2] + "/generation_config.json", "w"))
P
# a stale tokenizer.json in an existing output directory is replaced by the source's
mkdir -p "$W/auto" && echo stale > "$W/auto/tokenizer.json"
run auto --model "$W/bf" --steps 3 --save "$W/auto" --ckpt-dir "$W/ck"
run f32 --model "$W/bf" --steps 3 --save "$W/f32" --save-dtype fp32
run f16 --model "$W/bf" --steps 3 --save "$W/f16" --save-dtype fp16
"$B" convert --from-ckpt "$W/ck" --model-config "$W/bf" --to-hf "$W/conv" > "$W/conv.log" 2>&1
rc_is "convert --to-hf of the bf16 run's checkpoint" $? 0 "$W/conv.log" "BF16"
"$B" convert --from-ckpt "$W/ck" --model-config "$W/bf" --to-hf "$W/conv16" --save-dtype fp16 > "$W/conv16.log" 2>&1
rc_is "convert --to-hf --save-dtype fp16" $? 0 "$W/conv16.log" "F16"
# weightless sources: config.json's torch_dtype decides
tiny_model "$W/mb" llama '"num_hidden_layers": 2, "torch_dtype": "bfloat16"'
run cfgbf --model "$W/mb" --init random --steps 1 --save "$W/cfgbf"
# an fp32 source with weights stays F32
run f32src --model "$W/init" --steps 1 --save "$W/f32src"

"$PY" - "$W" "$SL_SRC/tests/ref" << 'P'
import json, os, sys
import numpy as np
W = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import common
fails = 0
def check(cond, msg):
    global fails
    print(("ok   " if cond else "FAIL ") + msg)
    fails += not cond
def load(d):
    hdr = common.st_read_header(d + "/model.safetensors")[0]
    raw = common.st_read(d + "/model.safetensors", to_f32=False)
    return {k: v["dtype"] for k, v in hdr.items()}, raw, json.load(open(d + "/config.json"))["torch_dtype"]
def all_dtype(d, dt, td):
    dts, _, t = load(W + "/" + d)
    check(set(dts.values()) == {dt} and t == td, f"{d}: {len(dts)} tensors {sorted(set(dts.values()))}, torch_dtype {t} (want {dt}, {td})")
all_dtype("init", "F32", "float32")
all_dtype("f32src", "F32", "float32")
all_dtype("cfgbf", "BF16", "bfloat16")
all_dtype("f32", "F32", "float32")
all_dtype("auto", "BF16", "bfloat16")
all_dtype("conv", "BF16", "bfloat16")
all_dtype("f16", "F16", "float16")
all_dtype("conv16", "F16", "float16")
d32, w32, _ = load(W + "/f32")
for d in ("auto", "conv"):
    dts, wb, _ = load(W + "/" + d)
    want = {k: common.f32_to_bf16_bits(v) for k, v in w32.items()}
    same = set(dts) == set(d32) and all(np.array_equal(wb[k], want[k]) for k in want)
    check(same, f"{d}: every tensor == the fp32 save rounded to bf16 (nearest even), names equal")
    changed = sum(int(not np.array_equal(wb[k], (w32[k].view(np.uint32) >> 16).astype(np.uint16))) for k in w32)
    check(changed > 0, f"negative control: truncation instead of rounding differs in {changed} of {len(w32)} {d} tensors")
for d in ("f16", "conv16"):
    _, wh, _ = load(W + "/" + d)
    same = set(wh) == set(w32) and all(np.array_equal(wh[k].view(np.uint16), w32[k].astype(np.float16).view(np.uint16)) for k in w32)
    check(same, f"{d}: every tensor == the fp32 save rounded to fp16")
for d in ("auto", "conv"):
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        p = f"{W}/{d}/{f}"
        check(os.path.isfile(p) and open(p, "rb").read() == open(f"{W}/bf/{f}", "rb").read(), f"{d}/{f} copied from the source")
left = [f for f in os.listdir(W) if ".tmp-" in f]
check(not left, f"no temporary directories left beside the outputs {left}")
sys.exit(1 if fails else 0)
P
[ $? = 0 ] && ok "saved dtypes, values and tokenizer files" || bad "saved dtypes, values or tokenizer files wrong"
cmp -s "$W/auto/model.safetensors" "$W/conv/model.safetensors" && ok "train --save == convert --to-hf (bf16, byte-identical)" \
  || bad "train --save and convert --to-hf differ"
# the saved bf16 directory loads back
run back --model "$W/auto" --steps 1 && ok "the bf16 save trains again (loads back)"
# a bad --save-dtype is refused by name
$RUN --model "$W/bf" --steps 1 --out-dir "$W/x" --save "$W/x/m" --save-dtype fp8 > "$W/bad.log" 2>&1
rc_is "train --save-dtype fp8 refused" $? 2 "$W/bad.log" "--save-dtype"
"$B" convert --from-ckpt "$W/ck" --model-config "$W/bf" --to-hf "$W/x2" --save-dtype half > "$W/bad2.log" 2>&1
rc_is "convert --save-dtype half refused" $? 2 "$W/bad2.log" "--save-dtype"
finish
