#!/bin/bash
# tests/cli/plan/test_plan_moe_check.sh — issue 43 item 9: `plan
# --engine-check` takes the routing options (--moe-capacity-factor,
# --moe-z-loss-coef, --moe-balance, --moe-bias-rate) and refuses what train
# refuses, through train's own checks. A capacity run at --ep 2 (world 2):
# the predicted arenas (acts, workspace: the exchange's buffers held for
# E cap rows) and peak equal the run's metrics exactly, and are smaller than
# the dropless prediction; --moe-bias-rate without bias is refused as train
# refuses it; --backend cuda --ep 2 is refused with train's message (the
# emulated CUDA backend's train run says the same, where it is built); the
# search refuses the routing options (it assumes dropless routing).
source "${SL_SRC:?}/tests/lib/run.sh" plan_moe_check mpi
tiny_model "$W/moe" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_data "$W/data" 20000
F="--zero 3 --ep 2 --micro-batch 2 --seq-len 16"
O="--moe-capacity-factor 1.0 --moe-z-loss-coef 0.01 --moe-balance bias --moe-bias-rate 0.01"
CHECK="plan --engine-check --model $W/moe --world 2 $F"
$MPI -np 2 "$B" train --model "$W/moe" --init random --data "$W/data" --threads 1 --steps 1 --summary false --plot false \
  --out-dir "$W/run" $F $O > "$W/run.log" 2>&1
rc_is "train at --ep 2 with the routing options" $? 0 "$W/run.log"
"$B" $CHECK $O --json > "$W/cap.json" 2> "$W/cap.err"
rc_is "plan --engine-check with the routing options" $? 0 "$W/cap.err"
"$B" $CHECK --json > "$W/free.json" 2> "$W/free.err" || bad "plan --engine-check, dropless"
out=$("$PY" - "$W/run/metrics.jsonl" "$W/cap.json" "$W/free.json" << 'P'
import json, sys
run = json.loads(open(sys.argv[1]).readline())
cap, free = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
bad = [a for a in ("params", "grads", "optim", "gather", "acts", "workspace") if cap["arena_peak"][a] != run["arena_peak"][a]]
if cap["peak_bytes"] != run["peak_bytes"]: bad.append("peak_bytes")
smaller = cap["arena_peak"]["acts"] < free["arena_peak"]["acts"] and cap["peak_bytes"] < free["peak_bytes"]
print("ok" if not bad and smaller else "bad", cap["arena_peak"]["acts"], run["arena_peak"]["acts"],
      free["arena_peak"]["acts"], cap["peak_bytes"], run["peak_bytes"], free["peak_bytes"], bad)
P
)
read -r v a1 a2 a3 p1 p2 p3 _ <<< "$out x x x x x x x"
[ "$v" = ok ] && ok "capacity 1.0 at EP 2: predicted acts $a1 = the run's $a2 < dropless $a3; peak $p1 = $p2 < $p3" ||
  bad "capacity prediction vs the run: $out"
"$B" $CHECK --moe-bias-rate 0.01 > "$W/rate.log" 2>&1
rc_is "--moe-bias-rate without --moe-balance bias refused, as train" $? 2 "$W/rate.log" "it needs --moe-balance bias (found aux)"
MSG="--ep 2: the device backends have no expert exchange yet (run --backend cpu)"
"$B" plan --engine-check --model "$W/moe" --world 2 --zero 3 --micro-batch 2 --seq-len 16 --ep 2 --backend cuda > "$W/cuda.log" 2>&1
rc_is "--backend cuda --ep 2 refused" $? 2 "$W/cuda.log" "$MSG"
if [ -x "$SL_BUILD/shardlm_emu" ]; then
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 $MPI -np 2 "$SL_BUILD/shardlm_emu" train --model "$W/moe" --init random \
    --data "$W/data" --threads 1 --steps 1 --backend cuda $F --out-dir "$W/emu" > "$W/emu.log" 2>&1
  rc_is "... the same refusal as train on the (emulated) CUDA backend" $? 2 "$W/emu.log" "$MSG"
else echo "(shardlm_emu not built: train's side of the CUDA refusal not run)"; fi
"$B" plan --model "$W/moe" --gpus 2 --gpu-mem 80G --seq-len 16 --global-batch 64 --moe-capacity-factor 1.0 > "$W/search.log" 2>&1
rc_is "the search refuses the routing options" $? 2 "$W/search.log" "the --moe-* routing options apply to --engine-check"
finish
