#!/bin/bash
# tests/cli/reliability/test_harden_minor27.sh — issue 27, minor group: the 1f1b refusal names
# the real flag (--grad-accum, not --micro-batches); the banner prints the
# model's parameter count (not one TP rank's slice) and the layout DP x TP x PP;
# eval --pp 2 runs under any schedule and equals --pp 1; docs name exit 3.
source "${SL_SRC:?}/tests/lib/harden.sh"
[ -n "$MPI2" ] || skip "no mpirun"
# 1f1b refusal: the flag train accepts
$MPI2 --steps 1 --pp 2 --out-dir "$W/pp" > "$W/pp.log" 2>&1
rc_is "train --pp 2 --grad-accum 1 (1f1b) refused" $? 2 "$W/pp.log" "use --grad-accum >= 2"
grep -q -- "use --micro-batches" "$W/pp.log" && bad "the refusal still names --micro-batches" || ok "no --micro-batches in the train refusal"
# banner: full count at TP 2 equals one process's; the layout is named
$TRAIN --steps 1 --out-dir "$W/one" > "$W/one.log" 2>&1 || bad "one-process run failed"
$MPI2 --steps 1 --tp 2 --out-dir "$W/tp" > "$W/tp.log" 2>&1 || bad "TP 2 run failed"
n1=$(grep -o '[0-9]* params' "$W/one.log" | head -1)
n2=$(grep -o '[0-9]* params' "$W/tp.log" | head -1)
[ -n "$n1" ] && [ "$n1" = "$n2" ] && ok "banner at TP 2: $n2 = one process's" || bad "banner params: one process '$n1', TP 2 '$n2'"
check "banner names the layout" grep -q "2 ranks (DP 1 x TP 2 x PP 1), ZeRO-" "$W/tp.log"
# eval --pp 2 runs under every schedule (forward only) and equals --pp 1 (the same sums: bit-identical)
$TRAIN --steps 1 --out-dir "$W/sv" --save "$W/hf" > /dev/null 2>&1 || bad "--save failed"
EV="eval --model $W/hf --data $W/data --seq-len 16 --micro-batch 2 --max-samples 8 --threads 1 --json"
want=$("$CLI" $EV 2> /dev/null | grep '"loss"' | cut -d, -f1)
for s in 1f1b zb1p; do # (interleaved needs more layers than this 1-layer model; checked by hand)
  got=$($MPI -np 2 "$CLI" $EV --pp 2 --pp-schedule $s 2> "$W/ev.log" | grep '"loss"' | cut -d, -f1)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "eval --pp 2 --pp-schedule $s: $got = --pp 1" ||
    { bad "eval --pp 2 --pp-schedule $s: '$got' vs '$want'"; tail -3 "$W/ev.log"; }
done
# NaN in the loaded weights: refused at load naming the tensor and the element
cp -r "$W/hf" "$W/hfnan"
"$PY" - "$W/hfnan/model.safetensors" <<'P'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
o = 8 + n + h["model.layers.0.input_layernorm.weight"]["data_offsets"][0] + 4 * 3
b[o:o + 4] = struct.pack("<f", float("nan")); open(sys.argv[1], "wb").write(b)
P
$CLI train ${ARGS/--model $W\/model/} --model "$W/hfnan" --init hf --steps 1 --out-dir "$W/nan" > "$W/nan.log" 2>&1
rc_is "NaN in a loaded weight" $? 2 "$W/nan.log" "tensor 'model.layers.0.input_layernorm.weight' has a non-finite value (nan) at element 3"
# plot of a metrics file whose losses are all null: says so, no SVG
printf '{"step": 1, "loss": null, "tokens_per_s": 10}\n{"step": 2, "loss": null, "tokens_per_s": 10}\n' > "$W/null.jsonl"
$CLI plot "$W/null.jsonl" "$W/null.svg" > "$W/plot.log" 2>&1
rc_is "plot of all-null losses" $? 2 "$W/plot.log" "no step had a finite loss"
check "no SVG written" test ! -e "$W/null.svg"
# --pp-dry-run applies the model's TP refusal (2 heads: --tp 3 refused as the real run does; --tp 2 passes)
$TRAIN --grad-accum 2 --pp 2 --tp 3 --pp-dry-run --out-dir "$W/dr" > "$W/dr.log" 2>&1
rc_is "--pp-dry-run --tp 3 with 2 heads" $? 2 "$W/dr.log" "valid --tp values for this model: 1, 2"
$TRAIN --grad-accum 2 --pp 2 --tp 2 --pp-dry-run --out-dir "$W/dr2" > "$W/dr2.log" 2>&1
rc_is "--pp-dry-run --tp 2" $? 0 "$W/dr2.log"
# ... and the start-up refusals that need no ranks, as the real run (max_position_embeddings 64)
$TRAIN --grad-accum 2 --pp 2 --seq-len 100 --pp-dry-run --out-dir "$W/dr3" > "$W/dr3.log" 2>&1
rc_is "--pp-dry-run --seq-len 100 over max_position_embeddings 64" $? 2 "$W/dr3.log" "above the model's max_position_embeddings 64"
$TRAIN --grad-accum 2 --seq-len 100 --steps 1 --out-dir "$W/dr4" > "$W/dr4.log" 2>&1
rc_is "the real run refuses it the same way" $? 2 "$W/dr4.log" "above the model's max_position_embeddings 64"
# docs: exit 3
check "docs/cli.md names exit 3" grep -q "3 a communication timeout" "$SL_SRC/docs/cli.md"
check "README failure section names exit 3" grep -q "Communication timeout\*\* (3)" "$SL_SRC/README.md"
finish
