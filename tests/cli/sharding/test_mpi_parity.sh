#!/usr/bin/env bash
# The parity contract across ranks (issue: fully sharded data parallel).
# Every (world size, ZeRO stage, prefetch, accumulation, shard group,
# checkpointing) configuration trains the same model as one process:
# per-step losses and final parameters to 1e-5 relative; at a fixed world
# size ZeRO 0/1/2/3 are bit-identical; also under --compute-dtype bf16.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_parity mpi numpy
L48='"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2'
tiny_model "$W/model" llama "$L48"
tiny_data "$W/data"
COMMON="--model $W/model --init random --data $W/data --data-order sequential --steps 20 --seq-len 16 --lr 1e-3 \
  --warmup 3 --clip 0.5 --threads 1 --summary false --plot false --log-every 100"
run() { # name world micro accum [flags...]
  local name=$1 np=$2 mb=$3 ga=$4; shift 4
  $MPI -np "$np" "$B" train $COMMON --micro-batch "$mb" --grad-accum "$ga" --out-dir "$W/$name" \
     --save "$W/$name/model" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "run $name (exit $rc)"; tail -5 "$W/$name.log"; return 1; fi
}
check() { # a b [--exact]
  if $CMP "$W/$1" "$W/$2" "${@:3}"; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
# G = 12 samples per step for every world size
run base 1 3 4 --zero 0
for np in 2 3 4; do
  case $np in 2) mb=3; ga=2;; 3) mb=2; ga=2;; 4) mb=3; ga=1;; esac
  for z in 0 1 2 3; do
    run w${np}z$z "$np" $mb $ga --zero $z && check w${np}z$z base --rtol 1e-5
  done
  for z in 1 2 3; do check w${np}z$z w${np}z0 --exact; done
done
# world 1: every stage equals the baseline bit for bit
for z in 1 3; do run w1z$z 1 3 4 --zero $z && check w1z$z base --exact; done
# prefetch depth, no-sync accumulation, hybrid sharding, checkpointing, reshard-after-forward
run pf0 2 3 2 --zero 3 --prefetch 0 && check pf0 w2z3 --exact
run pf2 2 3 2 --zero 3 --prefetch 2 && check pf2 w2z3 --exact
run nosync 2 3 2 --zero 3 --no-sync-accum && check nosync base --rtol 1e-5
run nosync0 2 3 2 --zero 0 --no-sync-accum && check nosync0 nosync --exact
run hsdp 4 3 1 --zero 3 --shard-group 2 && check hsdp base --rtol 1e-5
run hsdp2 4 3 1 --zero 2 --shard-group 2 && check hsdp2 hsdp --exact
run acsel 2 3 2 --zero 3 --activation-checkpoint selective && check acsel w2z3 --exact
run acfull 2 3 2 --zero 3 --activation-checkpoint full && check acfull w2z3 --exact
run nors 2 3 2 --zero 3 --reshard-after-forward false && check nors w2z3 --exact
# bf16 gathers and reductions: every stage still gives the same bits, and
# the losses stay near the fp32 run
run bf0 2 3 2 --zero 0 --param-dtype bf16 --reduce-dtype bf16
run bf3 2 3 2 --zero 3 --param-dtype bf16 --reduce-dtype bf16 && check bf3 bf0 --exact
check bf3 w2z3 --rtol 2e-2 --loss-only
# bf16 compute (docs/bf16.md; implies bf16 gathers): 2 ranks train like one
# process, losses to 1e-4 (measured 2.2e-5: the weight gradients' fp32 sums
# run in another order, a bf16 rounding point turns a last-bit difference
# into a one-ulp flip now and then, and Adam turns a flipped near-zero
# gradient into a full-size step, so parameters are not compared), and ZeRO
# 0 and 3 give the same bits
run cb 1 3 4 --zero 0 --compute-dtype bf16
run cb0 2 3 2 --zero 0 --compute-dtype bf16 && check cb0 cb --rtol 1e-4 --loss-only
run cb3 2 3 2 --zero 3 --compute-dtype bf16 && check cb3 cb0 --exact
# tied embeddings (the embedding unit is used by the head) under ZeRO-3
tiny_model "$W/model" tied "$L48"
run tbase 1 3 4 --zero 0
# (2e-5 here: the tied embedding's gradient is summed from two units, and
# Adam amplifies that extra round-off on near-zero gradients; measured 1.0e-5)
run tw3z3 3 2 2 --zero 3 && check tw3z3 tbase --rtol 2e-5
run tw3z0 3 2 2 --zero 0 && check tw3z0 tw3z3 --exact
finish
