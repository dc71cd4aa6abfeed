#!/usr/bin/env bash
# tests/cli/plan/test_plan_ep.sh — the planner under expert parallelism
# (docs/planner.md, "Expert parallelism"): the helper beside it
# ($SL_BUILD/tests/test_plan_ep) holds the closed forms of the all-to-all
# bytes and of the dense / expert states to the engine check exactly (tiny
# Mixtral, world 4, EP 2 and 4, checkpointing none / selective / full, one
# and two micro-batches; ZeRO 0-3) and searches the published Mixtral-8x7B
# and Qwen3-30B-A3B configs; negative control: with the expected bytes one
# row (hidden_size fp32) off, every all-to-all check fails. Here the
# CLI: `plan --engine-check --ep E` prints the counted all-to-all bytes (JSON
# comm_by_kind.alltoall, a text line) equal to the closed form the helper
# printed, a dense model's output has neither, and `plan` on the published
# configs lists EP 2 / 4 / 8 layouts, and on two nodes of 4 GPUs recommends
# EP 4 (its all-to-alls inside a node). About 10 s on 2 cores.
source "${SL_SRC:?}/tests/lib/run.sh" plan_ep
HELP="$SL_BUILD/tests/test_plan_ep"
[ -x "$HELP" ] || skip "$HELP not built"
F=$SL_SRC/tests/fixtures/hf-configs
export OMP_NUM_THREADS=1
if "$HELP" "$F/Mixtral-8x7B-v0.1/config.json" "$F/Qwen3-30B-A3B-Base/config.json" > "$W/helper.log" 2>&1 &&
  grep -q " passed, 0 failed" "$W/helper.log"; then
  ok "closed forms = the engine check: $(grep -c '^a2a' "$W/helper.log") all-to-all cases, $(tail -1 "$W/helper.log")"
else
  bad "closed forms vs the engine check"; grep -v '^a2a' "$W/helper.log" | tail -20
fi
grep "candidates," "$W/helper.log"
"$HELP" --plant-row > "$W/plant.log" 2>&1
nf=$(grep -c "^FAIL.*all-to-all bytes" "$W/plant.log") na=$(grep -c "^a2a" "$W/plant.log")
[ "$nf" -eq "$na" ] && [ "$na" -ge 12 ] && ok "negative control: one planted row fails all $nf all-to-all checks" ||
  { bad "negative control: $nf of $na all-to-all checks failed with a planted row"; tail -5 "$W/plant.log"; }
grep "^note" "$W/helper.log"
# the same tiny Mixtral as the helper's
tiny_model "$W/mx" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
CHECK=(plan --engine-check --world 4 --zero 3 --micro-batch 3 --seq-len 16)
# the CLI's counted bytes against the helper's closed form
n=0
while read -r _ ep ac ga want; do
  got=$("$B" "${CHECK[@]}" --model "$W/mx" --ep "$ep" --grad-accum "$ga" --activation-checkpoint "$ac" --json |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["comm_by_kind"]["alltoall"])')
  if [ "$got" = "$want" ]; then n=$((n + 1)); else bad "EP $ep $ac x$ga: CLI $got, closed form $want"; fi
done < <(grep '^a2a ' "$W/helper.log")
[ "$n" -eq 12 ] && ok "plan --engine-check --json: comm_by_kind.alltoall = the closed form in all $n cases" ||
  bad "only $n of 12 engine checks compared"
"$B" "${CHECK[@]}" --model "$W/mx" --ep 2 > "$W/ep2.txt" 2>&1
grep -q "^  all-to-all bytes per step 49216 (EP 2" "$W/ep2.txt" && ok "text: $(grep all-to-all "$W/ep2.txt")" ||
  { bad "text: no all-to-all line"; cat "$W/ep2.txt"; }
"$B" "${CHECK[@]}" --model "$W/llama" --json > "$W/dense.json" && "$B" "${CHECK[@]}" --model "$W/llama" > "$W/dense.txt" &&
  ! grep -q "alltoall" "$W/dense.json" && ! grep -q "all-to-all" "$W/dense.txt" &&
  ok "a dense model's engine check prints no all-to-all figure" || bad "a dense model's engine check changed"
# the search on the published configs lists EP layouts (8 GPUs, 80 GB, seq 4096, 976 sequences: 3997696 tokens, what 4M was rounded to before plan refused an inexact batch)
for m in Mixtral-8x7B-v0.1 Qwen3-30B-A3B-Base; do
  "$B" plan --model "$F/$m" --gpus 8 --gpu-mem 80G --seq-len 4096 --global-batch 3997696 --top 0 > "$W/$m.txt" 2>&1
  rc_is "plan $m" $? 0 "$W/$m.txt" "EPn: expert parallelism"
  eps=$(grep -oE "^ +[0-9]+ (yes|no |ref) +EP[0-9]+" "$W/$m.txt" | awk '{print $3}' | sort -u | tr '\n' ' ')
  [ "$eps" = "EP2 EP4 EP8 " ] && ok "$m: the search lists ${eps% } layouts ($(grep -c ' EP[0-9]' "$W/$m.txt") rows)" ||
    bad "$m: EP layouts listed: '$eps'"
done
# 4 GPUs a node, 180 GB: EP 4 (its all-to-alls inside a node) is the pick, its command has --ep 4, and while train
# refuses --ep on a device backend the output says so in the engine's words
"$B" plan --model "$F/Mixtral-8x7B-v0.1" --gpus 8 --gpus-per-node 4 --gpu-mem 180G --seq-len 4096 --global-batch 3997696 \
  --no-tp-pp > "$W/pick.txt" 2>&1
grep -q "shardlm train .* --ep 4 --zero 2" "$W/pick.txt" &&
  { ! grep -q "on a GPU today" "$W/pick.txt" || grep -q "on a GPU today: --ep 4: the device backends" "$W/pick.txt"; } &&
  ok "Mixtral-8x7B, 2 nodes of 4: $(grep -o 'Recommended: [^.]*' "$W/pick.txt")" ||
  { bad "Mixtral-8x7B, 2 nodes of 4: no EP 4 pick"; tail -4 "$W/pick.txt"; }
finish
