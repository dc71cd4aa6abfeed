#!/usr/bin/env bash
# tests/cli/plan/test_plan_tp.sh — the planner's engine check under tensor
# parallelism (shardlm plan --engine-check --tp T) against what the engine
# measures (shardlm train --tp T under mpirun, --metrics): TP 2 and 4, DP 1
# and 2, ZeRO 0 and 3, GQA with fewer KV heads than T (a replicated KV
# group), Mistral with tied embeddings, gradient accumulation and full
# checkpointing (the recomputation repeats the TP all-reduces), and, where
# train has --sequence-parallel, sequence parallelism. Per step:
# every arena the engine's code allocates (params grads optim gather acts
# workspace), the DP bytes ("comm_bytes") and the TP bytes per kind
# ("tp_bytes") must be EQUAL. "peak_bytes" is exact too once the CPU
# kernels' own scratch arena is added (the trainer records the backend's
# scratch after each step; the counting op table has none): the larger of
# the predicted step peak plus the scratch the previous step left, and the
# predicted bytes held at the step's end ("start_bytes") plus the scratch
# recorded then. Plus a negative control (a TP 4
# prediction must not match a TP 2 run), the plan's mesh fields, and the
# search's recommended command line, run as printed.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC (source root).
source "${SL_SRC:?}/tests/lib/run.sh" plan_tp mpi
BIN=$B
export OMP_NUM_THREADS=1
# GQA: 2 KV heads, so T = 4 replicates each KV group over 2 ranks; odd vocabulary
tiny_model "$W/llama" llama '"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "vocab_size": 301, "rms_norm_eps": null, "rope_theta": null'
# one KV head (replicated over every TP rank), sliding window, tied head
tiny_model "$W/mistral" mistral '"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96,
 "num_key_value_heads": 1, "num_hidden_layers": 2, "tie_word_embeddings": true, "rms_norm_eps": null, "rope_theta": null'

# case: name model world tp flags...   (train and plan take the same flag names)
run_case() {
  local name=$1 model=$2 world=$3 tp=$4
  shift 4
  local m="$W/$name.jsonl" p="$W/$name.plan.json" log="$W/$name.log"
  if ! timeout 120 $MPI -np "$world" "$BIN" train --model "$W/$model" --init random --tp "$tp" --steps 2 --threads 1 \
      --metrics "$m" --out-dir "$W/out_$name" --plot false --summary false "$@" >"$log" 2>&1; then
    bad "$name: train failed"; tail -15 "$log"; return
  fi
  local pflags=() a # plan takes the same flags; --sequence-parallel without a value
  while [ $# -gt 0 ]; do
    a=$1; shift
    if [ "$a" = --sequence-parallel ]; then [ "$1" = true ] && pflags+=("$a"); shift; else pflags+=("$a"); fi
  done
  if ! "$BIN" plan --engine-check --model "$W/$model" --world "$world" --tp "$tp" "${pflags[@]}" --json >"$p" 2>"$log.plan"; then
    bad "$name: plan failed"; cat "$log.plan"; return
  fi
  local out
  out=$("$PY" - "$m" "$p" "$world" "$tp" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
plan = json.load(open(sys.argv[2]))
W, T = int(sys.argv[3]), int(sys.argv[4])
bad = []
if len(steps) != 2:
    bad.append(f"{len(steps)} metrics lines, want 2")
if plan.get("tp") != T or plan.get("dp") != W // T:
    bad.append(f"plan mesh tp {plan.get('tp')} dp {plan.get('dp')}, want {T} x {W // T}")
scratch = 0  # the CPU backend's scratch arena as the previous step left it
for st in steps:
    s = st["step"]
    for a in ("params", "grads", "optim", "gather", "acts", "workspace"):
        if plan["arena_peak"][a] != st["arena_peak"][a]:
            bad.append(f"step {s} {a}: engine {st['arena_peak'][a]} plan {plan['arena_peak'][a]}")
    # the high-water of the sum: the step's own peak over the scratch the previous step left,
    # or what is held at the step's end plus the scratch the trainer records then
    want = max(plan["peak_bytes"] + scratch, plan["start_bytes"] + st["arena_peak"]["scratch"])
    if want != st["peak_bytes"]:
        bad.append(f"step {s} peak_bytes: engine {st['peak_bytes']} plan {want} (peak {plan['peak_bytes']}, "
                   f"held {plan['start_bytes']}, scratch {scratch} -> {st['arena_peak']['scratch']})")
    scratch = st["arena_peak"]["scratch"]
    if plan["comm_bytes"] != st["comm_bytes"]:
        bad.append(f"step {s} DP comm_bytes: engine {st['comm_bytes']} plan {plan['comm_bytes']}")
    for k in ("allgather", "reduce_scatter", "allreduce"):
        e, q = st.get("tp_bytes", {}).get(k), plan.get("tp_bytes", {}).get(k)
        if e is None or e != q:
            bad.append(f"step {s} tp_bytes.{k}: engine {e} plan {q}")
if sum(plan.get("tp_bytes", {}).values()) == 0:
    bad.append("the plan moves no TP bytes")  # a check that cannot fail is no check
tb = plan.get("tp_bytes", {})
print("OK" if not bad else "BAD", f"dp {plan['comm_bytes']} tp ag/rs/ar {tb.get('allgather')}/{tb.get('reduce_scatter')}/{tb.get('allreduce')}"
      f" peak {plan['peak_bytes']}" if not bad else "; ".join(bad))
PYEOF
)
  case "$out" in
    OK*) ok "$name (exact: ${out#OK })" ;;
    *) bad "$name: ${out#BAD }" ;;
  esac
}

run_case tp2_dp1_z3 llama 2 2 --zero 3 --micro-batch 2 --seq-len 16 --grad-accum 2
run_case tp2_dp2_z0 llama 4 2 --zero 0 --micro-batch 1 --seq-len 16 --grad-accum 1
run_case tp2_dp2_z3_full llama 4 2 --zero 3 --micro-batch 1 --seq-len 16 --grad-accum 2 --activation-checkpoint full
run_case tp4_dp1_z3_gqa llama 4 4 --zero 3 --micro-batch 2 --seq-len 16 --grad-accum 1
run_case tp4_dp1_z0_mistral mistral 4 4 --zero 0 --micro-batch 1 --seq-len 16 --grad-accum 2
run_case tp4_dp2_z3_mistral mistral 8 4 --zero 3 --micro-batch 1 --seq-len 16 --grad-accum 1

# sequence parallelism (where the engine has it): reduce-scatter / all-gather instead of all-reduce
if "$BIN" train --help 2>&1 | grep -q -- --sequence-parallel; then
  run_case tp2_dp2_z3_sp llama 4 2 --zero 3 --micro-batch 1 --seq-len 16 --grad-accum 2 --sequence-parallel true
  run_case tp4_dp1_z0_sp_mistral mistral 4 4 --zero 0 --micro-batch 1 --seq-len 16 --grad-accum 1 \
    --activation-checkpoint full --sequence-parallel true
else
  echo "skip sequence-parallel cases: this build's train has no --sequence-parallel"
fi

# negative control: a TP 4 prediction must not match the TP 2 run's TP bytes
if [ -f "$W/tp2_dp2_z0.jsonl" ] && "$BIN" plan --engine-check --model "$W/llama" --world 4 --tp 4 --zero 0 \
    --micro-batch 1 --seq-len 16 --grad-accum 1 --json >"$W/neg.json" 2>/dev/null; then
  if "$PY" -c "import json,sys; a=json.loads(open(sys.argv[1]).readline()); b=json.load(open(sys.argv[2])); sys.exit(0 if a['tp_bytes']!=b['tp_bytes'] and a['arena_peak']['params']!=b['arena_peak']['params'] else 1)" "$W/tp2_dp2_z0.jsonl" "$W/neg.json"; then
    ok "negative control (a TP 4 prediction differs from the TP 2 run)"
  else
    bad "negative control: a TP 4 prediction matches the TP 2 run"
  fi
else
  bad "negative control: no run or no plan"
fi
# a --tp that does not divide --world is refused (exit 2, naming both)
msg=$("$BIN" plan --engine-check --model "$W/llama" --world 6 --tp 4 --zero 3 --micro-batch 1 --seq-len 16 \
  --grad-accum 1 2>&1 >/dev/null); rc=$?
if [ "$rc" = 2 ] && echo "$msg" | grep -q -- "--tp 4" && echo "$msg" | grep -q 6; then
  ok "refusal: $msg"
else
  bad "refusal: exit $rc, '$msg'"
fi

# the search's recommendation is a command line that trains (one step here)
cmd=$("$BIN" plan --model "$W/llama" --gpus 2 --gpu-mem 80G --seq-len 16 --global-batch 128 --dtype fp32 --json |
  "$PY" -c "import json,sys; print(json.load(sys.stdin)['recommended']['command'])")
case "$cmd" in
  "mpirun -np 2 shardlm train "*)
    # shellcheck disable=SC2086 # the command's words, as a user pastes them
    if timeout 120 $MPI -np 2 "$BIN" ${cmd#mpirun -np 2 shardlm } --steps 1 --threads 1 --out-dir "$W/cmd" \
        --plot false --summary false >"$W/cmd.log" 2>&1; then
      ok "the recommended command runs: $cmd"
    else
      bad "the recommended command: $cmd"; tail -5 "$W/cmd.log"
    fi ;;
  *) bad "no recommended command: '$cmd'" ;;
esac

finish
