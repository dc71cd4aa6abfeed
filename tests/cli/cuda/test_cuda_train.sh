#!/usr/bin/env bash
# GPU training against the CPU backend (runs only where a GPU exists; exit
# 77 elsewhere): the same tiny Llama for 10 steps on --backend cuda and
# --backend cpu, fp32: per-step losses within 1e-4; ZeRO-3 at world size 1
# exercises the gather / reduce-scatter path (one-rank device comms: device
# copies, no NCCL), and must equal ZeRO-0 bit for bit. --compute-dtype bf16
# on the GPU against the CPU mirror (docs/bf16.md): losses within 1e-3
# relative (a rounding point turns an fp32 summation-order difference into
# an occasional one-ulp bf16 flip, so not 1e-4). The oracle script runs
# under ${PYTHON:-python3} (it needs numpy: on the GPU machine that is the
# venv's python3, not /usr/bin/python3).
source "${SL_SRC:?}/tests/lib/run.sh" cuda_train
command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1 || skip "no GPU"
# not the numpy need: the oracle runs under ${PYTHON:-python3}, not /usr/bin/python3
"${PYTHON:-python3}" -c "import numpy" 2> /dev/null || skip "${PYTHON:-python3} has no numpy"
CMP="${PYTHON:-python3} $SL_SRC/tests/lib/compare.py"
tiny_model "$W/model" llama '"hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
 "vocab_size": 320, "rope_theta": null'
tiny_data "$W/data"
A="--model $W/model --init random --data $W/data --data-order sequential --steps 10 --micro-batch 4 --seq-len 64 --summary false --plot false --compute-dtype fp32"
run() { local n=$1; shift; "$B" train $A --out-dir "$W/$n" --save "$W/$n/model" "$@" > "$W/$n.log" 2>&1 || { bad "run $n"; tail -5 "$W/$n.log"; return 1; }; }
run cpu --backend cpu --zero 0
run gpu0 --backend cuda --zero 0
run gpu3 --backend cuda --zero 3
run cpub --backend cpu --zero 0 --compute-dtype bf16
run gpub --backend cuda --zero 0 --compute-dtype bf16
check() {
  if $CMP "$W/$1" "$W/$2" "${@:3}"; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
check gpu0 cpu --rtol 1e-4 --loss-only
check gpu3 gpu0 --exact
check gpub cpub --rtol 1e-3 --loss-only
finish
