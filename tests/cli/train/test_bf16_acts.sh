#!/usr/bin/env bash
# bf16 activation storage (docs/bf16.md): under --compute-dtype bf16 a
# block's kept activations whose values are bf16 (what kernels/bf16.c
# rounds) are packed in bf16 between its forward and its backward
# (models/decoder.c), the rest (residual, statistics, indices) kept as
# bits; the Llama family's residual stream is rounded to bf16 and stored so
# too (--residual-dtype auto). Lossless, so each run equals the same run with SL_ACT_FP32=1 bit for
# bit (losses, grad norms, weights): Llama (ZeRO-3, selective checkpointing,
# PP 2 1f1b and zb1p, TP 2 with sequence parallelism), Qwen3 (q/k norms),
# Gemma 2 (post-norms; at TP 2 their inputs are TP sums, kept fp32),
# Mixtral at EP 2, Mamba (TP 1 and 2; x_proj's output at TP 2 is a TP sum,
# kept fp32) and Falcon-Mamba (its dt/B/C norms). Each
# bf16 run's acts arena is below its fp32 twin's, and `plan --engine-check
# --compute-dtype bf16` predicts the run's arenas exactly. Negative
# control: SL_FAULT_ACT_BF16=1 (every kept buffer packed, the fp32
# statistics too) is not bit-identical. Then the acts arena's halving (below),
# --compute-dtype auto in the engine check (bf16 for --backend cuda, fp32 for
# cpu) and --residual-dtype's refusals. ~16 s on 2 cores.
source "${SL_SRC:?}/tests/lib/run.sh" bf16_acts mpi numpy
tiny_model "$W/llama" llama '"num_hidden_layers": 4'
tiny_model "$W/qwen3" llama '"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 3,
 "head_dim": 12'
tiny_model "$W/gemma2" tied '"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 4,
 "head_dim": 8, "sliding_window": 6, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0,
 "query_pre_attn_scalar": 8, "hidden_activation": "gelu_pytorch_tanh"'
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 3,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/mamba" mamba '"num_hidden_layers": 2'
tiny_model "$W/falcon" mamba '"num_hidden_layers": 2, "architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba"'
tiny_data "$W/data"
run() { # model name world micro accum [flags...]
  local arch=$1 name=$2 np=$3 mb=$4 ga=$5; shift 5
  $MPI -np "$np" "$B" train --model "$W/$arch" --init random --data "$W/data" --data-order sequential --steps 4 --seq-len 16 \
    --lr 1e-3 --warmup 2 --clip 0.5 --weight-decay 0.1 --threads 1 --summary false --plot false --log-every 100 \
    --micro-batch "$mb" --grad-accum "$ga" --compute-dtype bf16 --out-dir "$W/$arch-$name" \
    --save "$W/$arch-$name/model" "$@" > "$W/$arch-$name.log" 2>&1 ||
    { bad "run $arch $name (exit $?)"; grep -h "shardlm:" "$W/$arch-$name.log" | head -3; return 1; }
}
acts() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['arena_peak']['acts'])" "$1/metrics.jsonl"; }
# model name world micro accum [flags]: the bf16-stored run against its fp32-stored twin
pair() {
  local arch=$1 name=$2
  shift 2
  SL_ACT_FP32=1 run "$arch" "${name}_f" "$@" && run "$arch" "$name" "$@" || return
  local a b
  a=$(acts "$W/$arch-$name") b=$(acts "$W/$arch-${name}_f")
  if ! $CMP "$W/$arch-$name" "$W/$arch-${name}_f" --exact > "$W/cmp.txt"; then bad "$arch $name: not bit-identical"; cat "$W/cmp.txt"
  elif [ "$a" -lt "$b" ]; then ok "$arch $name: bit-identical; acts $a of $b bytes"
  else bad "$arch $name: acts $a bytes (fp32 storage $b)"; fi
}
pair llama z3 2 2 2 --zero 3
pair llama sel 2 2 2 --zero 3 --activation-checkpoint selective
pair llama pp 2 2 4 --pp 2
pair llama zb 2 2 4 --pp 2 --pp-schedule zb1p
pair llama tp 2 4 2 --tp 2 --sequence-parallel
pair llama r32 2 2 2 --zero 3 --residual-dtype fp32
pair qwen3 z1 1 2 2
pair gemma2 z1 1 2 2
pair gemma2 tp 2 2 2 --tp 2
pair mixtral ep 2 2 2 --ep 2 --zero 3
pair mamba z1 1 2 2
pair mamba tp 2 2 2 --tp 2
pair falcon z1 1 2 2
# the engine check predicts the bf16-stored run's arenas exactly
if "$B" plan --engine-check --json --model "$W/llama" --world 2 --zero 3 --micro-batch 2 --seq-len 16 --grad-accum 2 \
  --compute-dtype bf16 > "$W/plan.json" 2> "$W/plan.log" &&
  "$PY" - "$W/plan.json" "$W/llama-z3/metrics.jsonl" << 'P'; then
import json, sys
p, s = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).readline())
bad = [(a, s["arena_peak"][a], p["arena_peak"][a]) for a in ("acts", "workspace", "gather", "grads", "params")
       if s["arena_peak"][a] != p["arena_peak"][a]]
print("  differ:", bad) if bad else None
sys.exit(1 if bad else 0)
P
  ok "plan --engine-check --compute-dtype bf16 predicts the run's arenas"
else bad "plan --engine-check --compute-dtype bf16 vs the run"; tail -3 "$W/plan.log"; fi
# the acts arena halves: in the metrics of a real run (8 layers, hidden 256,
# 1 step; fp32 vs bf16 compute) and in the engine check at Llama-3.1-8B's
# shape (none and selective checkpointing). What stays fp32 (norm and
# softmax statistics, the head's input stream[L] and its norm) is 1% of the
# fp32 arena at the small shape (measured 0.509), 0.3% at 8B (0.502, 0.503):
# bounds 0.52 and 0.505. (--residual-dtype fp32, the stream and xmid kept
# fp32, measured 0.561 at 8B.)
tiny_model "$W/mid" llama '"num_hidden_layers": 8, "hidden_size": 256, "intermediate_size": 688'
half() { # label fp32-bytes bf16-bytes bound
  local r
  r=$("$PY" -c "import sys; a, b, t = map(float, sys.argv[1:]); print('%.4f %s' % (b / a, 'ok' if b / a <= t else 'BAD'))" "$2" "$3" "$4")
  case $r in *ok) ok "$1: acts bf16 / fp32 = ${r% *} (<= $4; $3 of $2 bytes)" ;; *) bad "$1: acts bf16 / fp32 = $r (bound $4)" ;; esac
}
for d in fp32 bf16; do
  "$B" train --model "$W/mid" --init random --data "$W/data" --data-order sequential --steps 1 --seq-len 256 --micro-batch 1 \
    --threads 1 --summary false --plot false --compute-dtype $d --out-dir "$W/mid-$d" > "$W/mid-$d.log" 2>&1 ||
    bad "run mid $d"
done
half "8 layers, hidden 256, the run's metrics" "$(acts "$W/mid-fp32")" "$(acts "$W/mid-bf16")" 0.52
P8="--engine-check --json --model $SL_SRC/tests/fixtures/hf-configs/Llama-3.1-8B --world 8 --zero 3 --micro-batch 1
  --seq-len 4096"
for ac in none selective; do
  for d in fp32 bf16; do
    "$B" plan $P8 --activation-checkpoint $ac --compute-dtype $d > "$W/p8-$ac-$d.json" 2> "$W/p8.log" || bad "plan 8B $d $ac"
  done
  half "Llama-3.1-8B, --activation-checkpoint $ac, the engine check" \
    "$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['arena_peak']['acts'])" "$W/p8-$ac-fp32.json")" \
    "$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['arena_peak']['acts'])" "$W/p8-$ac-bf16.json")" 0.505
done
# --compute-dtype auto (the default) in the engine check: bf16 for --backend cuda, fp32 for --backend cpu
for be in cuda:bf16 cpu:fp32; do
  "$B" plan $P8 --activation-checkpoint none --backend ${be%:*} > "$W/p8-auto-${be%:*}.json" 2> "$W/p8.log" ||
    bad "plan 8B auto --backend ${be%:*}"
  if "$PY" -c "import json,sys; a, b = (json.load(open(f))['arena_peak'] for f in sys.argv[1:]); sys.exit(a != b)" \
    "$W/p8-auto-${be%:*}.json" "$W/p8-none-${be#*:}.json"; then
    ok "plan --engine-check --backend ${be%:*}: auto predicts the ${be#*:} run's arenas"
  else bad "plan --engine-check --backend ${be%:*}: auto is not the ${be#*:} run"; fi
done
# and the bound can fail: an fp32 residual stream (--residual-dtype fp32)
"$B" plan $P8 --compute-dtype bf16 --residual-dtype fp32 > "$W/p8-r32.json" 2> "$W/p8.log" || bad "plan 8B fp32 residual"
r=$("$PY" -c "import json,sys; a, b = (json.load(open(f))['arena_peak']['acts'] for f in sys.argv[1:]); print('%.3f' % (b / a))" \
  "$W/p8-none-fp32.json" "$W/p8-r32.json")
case $r in 0.50[0-5]*) bad "--residual-dtype fp32: acts ratio $r within the bound" ;; *) ok "--residual-dtype fp32: acts ratio $r, over the bound" ;; esac
# --residual-dtype's refusals: a value it does not know, bf16 without bf16 compute, bf16 for Mamba
refuse() { # name needle [flags...]
  local n=$1 needle=$2 rc=0
  shift 2
  "$B" train --init random --data "$W/data" --steps 1 --seq-len 16 --threads 1 --out-dir "$W/r-$n" "$@" > "$W/r-$n.log" 2>&1 || rc=$?
  rc_is "refused: $n" "$rc" 2 "$W/r-$n.log" "$needle"
}
refuse fp16 "--residual-dtype must be fp32, bf16 or auto, found 'fp16'" --model "$W/llama" --residual-dtype fp16
refuse fp32compute "--residual-dtype bf16 needs --compute-dtype bf16" --model "$W/llama" --residual-dtype bf16 \
  --compute-dtype fp32
refuse tf32 "--tf32 must be true, false or auto, found 'yes'" --model "$W/llama" --tf32 yes
refuse mamba "keeps its residual stream in fp32" --model "$W/mamba" --residual-dtype bf16 --compute-dtype bf16
# negative control: packing the fp32 residual and statistics too is lossy
SL_FAULT_ACT_BF16=1 run llama lossy 2 2 2 --zero 3 &&
  if $CMP "$W/llama-lossy" "$W/llama-z3_f" --exact > "$W/cmp.txt"; then bad "negative control: lossy packing passes"
  else ok "negative control: packing every buffer is not bit-identical ($(head -c 90 "$W/cmp.txt"))"; fi
finish
