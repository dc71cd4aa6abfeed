#!/usr/bin/env bash
# tests/cli/plan/test_plan_vs_engine.sh — the planner's engine-exact prediction
# (shardlm plan --engine-check) against what the engine measures
# (shardlm train --metrics: "arena_peak" per arena, "peak_bytes" and
# "comm_bytes" per step) on the CPU backend with tiny models.
# Runs (about 2 s each) ZeRO 0-3 at world 2 and 3, ZeRO-3 at world 1 and 4,
# ZeRO-0 at world 4, plus variants: gradient accumulation 1-3, selective /
# full checkpointing, bf16 gathers and reductions, a hybrid shard group
# (replica all-reduce), tied embeddings with padding, --no-sync-accum,
# --reshard-after-forward false, a Qwen3 (q/k norms, biases) with selective
# checkpointing, a Mixtral at --ep 2; and a negative control. (All 16 pairs pass
# too; the subset keeps the test near 40 s on 2 cores.) Every arena and the comm bytes of every step
# must agree within 2%; the script prints the worst relative error.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC (source root).
source "${SL_SRC:?}/tests/lib/run.sh" plan_vs_engine mpi
BIN=$B
export OMP_NUM_THREADS=1
TINY="$SL_SRC/configs/tiny-llama"
TIED="$W/tied"
# odd sizes: padding for every world size, GQA, tied LM head (a pinned unit)
tiny_model "$TIED" tied '"model_type": "llama", "hidden_size": 96, "intermediate_size": 200,
 "num_attention_heads": 6, "num_hidden_layers": 3, "vocab_size": 301, "rms_norm_eps": null, "rope_theta": null'

# Qwen3: q/k norms (their kept pre-norm q|k|v and rstd, the backward's scratch), head_dim 12, q/k/v/o biases
Q3="$W/qwen3"
tiny_model "$Q3" llama '"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128,
 "intermediate_size": 352, "vocab_size": 320, "head_dim": 40, "attention_bias": true'

MIX="$W/mixtral"
tiny_model "$MIX" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "hidden_size": 128, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2'

worst=0
# case: name model world flags...   (train and plan take the same flag names)
run_case() {
  local name=$1 model=$2 world=$3
  shift 3
  local m="$W/$name.jsonl" p="$W/$name.plan.json" log="$W/$name.log"
  if ! timeout 120 $MPI -np "$world" "$BIN" train --model "$model" --init random --steps 2 --threads 1 \
      --metrics "$m" --out-dir "$W/out_$name" --plot false --summary false "$@" >"$log" 2>&1; then
    bad "$name: train failed"; tail -15 "$log"; return
  fi
  # plan: same flags, mapped where the names differ
  local pflags=() a
  while [ $# -gt 0 ]; do
    a=$1; shift
    case "$a" in
      --no-sync-accum) pflags+=(--no-sync-accum); [ "${1:-}" = true ] && shift ;;
      --reshard-after-forward) [ "$1" = false ] && pflags+=(--no-reshard); shift ;;
      *) pflags+=("$a" "$1"); shift ;;
    esac
  done
  if ! "$BIN" plan --engine-check --model "$model" --world "$world" "${pflags[@]}" --json >"$p" 2>"$log.plan"; then
    bad "$name: plan failed"; cat "$log.plan"; return
  fi
  local out
  out=$("$PY" - "$m" "$p" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
plan = json.load(open(sys.argv[2]))
worst, bad, msgs = 0.0, 0, []
def cmp(what, got, want):
    global worst, bad
    err = abs(got - want) / max(abs(want), 1)
    worst = max(worst, err)
    if err > 0.02:
        bad += 1
        msgs.append(f"{what}: engine {want} planner {got} ({100*err:.2f}%)")
for st in steps:
    for a in ("params", "grads", "optim", "gather", "acts", "workspace"):
        cmp(f"step {st['step']} {a}", plan["arena_peak"][a], st["arena_peak"][a])
    cmp(f"step {st['step']} peak_bytes", plan["peak_bytes"], st["peak_bytes"])
    cmp(f"step {st['step']} comm_bytes", plan["comm_bytes"], st["comm_bytes"])
if len(steps) != 2:
    bad += 1; msgs.append(f"{len(steps)} metrics lines, want 2")
print(f"{worst:.6f} {bad} " + "; ".join(msgs))
PYEOF
)
  local w b msg
  w=$(echo "$out" | cut -d' ' -f1); b=$(echo "$out" | cut -d' ' -f2); msg=$(echo "$out" | cut -d' ' -f3-)
  worst=$("$PY" -c "print(max($worst, $w))")
  if [ "$b" = 0 ]; then
    ok "$name (worst relative error $w; comm $(grep -o '"comm_bytes": [0-9]*' "$p"))"
  else
    bad "$name: $msg"
  fi
}

for w in 2 3; do
  for z in 0 1 2 3; do
    run_case "w${w}_z${z}" "$TINY" "$w" --zero "$z" --micro-batch 2 --seq-len 32 --grad-accum 2
  done
done
run_case w1_z3 "$TINY" 1 --zero 3 --micro-batch 2 --seq-len 32 --grad-accum 2
run_case w4_z3 "$TINY" 4 --zero 3 --micro-batch 2 --seq-len 32 --grad-accum 2
run_case w4_z0 "$TINY" 4 --zero 0 --micro-batch 2 --seq-len 32 --grad-accum 1
run_case w3_z1_sel_a3 "$TINY" 3 --zero 1 --micro-batch 1 --seq-len 48 --grad-accum 3 --activation-checkpoint selective
run_case w2_z3_full "$TINY" 2 --zero 3 --micro-batch 2 --seq-len 32 --grad-accum 1 --activation-checkpoint full
run_case w2_z2_bf16 "$TINY" 2 --zero 2 --micro-batch 2 --seq-len 32 --grad-accum 2 --param-dtype bf16 --reduce-dtype bf16
run_case w3_z3_bf16 "$TINY" 3 --zero 3 --micro-batch 1 --seq-len 32 --grad-accum 2 --param-dtype bf16
run_case w4_z3_hybrid "$TINY" 4 --zero 3 --shard-group 2 --micro-batch 1 --seq-len 32 --grad-accum 2
run_case w3_z3_tied "$TIED" 3 --zero 3 --micro-batch 2 --seq-len 24 --grad-accum 2
run_case w2_z2_tied_full "$TIED" 2 --zero 2 --micro-batch 1 --seq-len 24 --grad-accum 1 --activation-checkpoint full
run_case w2_z3_nosync "$TINY" 2 --zero 3 --micro-batch 1 --seq-len 32 --grad-accum 3 --no-sync-accum true
run_case w2_z3_qwen3_sel "$Q3" 2 --zero 3 --micro-batch 2 --seq-len 32 --grad-accum 2 --activation-checkpoint selective
run_case w2_z3_noreshard "$TINY" 2 --zero 3 --micro-batch 1 --seq-len 32 --grad-accum 1 --reshard-after-forward false
# Mixtral at EP 2 (world 4): the experts units sharded over 2 ranks, the exchange's buffers for every row
run_case w4_z3_mixtral_ep2 "$MIX" 4 --zero 3 --ep 2 --micro-batch 2 --seq-len 32 --grad-accum 1

# negative control: the comparison must notice a wrong stage
if [ -f "$W/w2_z3.jsonl" ] && "$BIN" plan --engine-check --model "$TINY" --world 2 --zero 2 --micro-batch 2 \
    --seq-len 32 --grad-accum 2 --json >"$W/neg.json" 2>/dev/null; then
  if "$PY" -c "import json,sys; a=json.loads(open(sys.argv[1]).readline()); b=json.load(open(sys.argv[2])); sys.exit(0 if a['comm_bytes']!=b['comm_bytes'] and a['arena_peak']['gather']!=b['arena_peak']['gather'] else 1)" "$W/w2_z3.jsonl" "$W/neg.json"; then
    ok "negative control (ZeRO-2 prediction differs from the ZeRO-3 run)"
  else
    bad "negative control: a ZeRO-2 prediction matches the ZeRO-3 run"
  fi
fi

echo "worst relative error over all arenas and comm bytes: $worst"
finish
