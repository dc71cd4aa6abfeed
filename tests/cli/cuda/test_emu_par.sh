#!/usr/bin/env bash
# Tensor and pipeline parallelism on the device trainer, on the CPU:
# build/shardlm_emu --backend cuda (the emulated CUDA backend; the TP axis
# over shard/comm_nccl.c on the NCCL stand-in, the PP transfers staged
# through the host, docs/cuda.md "TP and PP on CUDA") against
# build/shardlm --backend cpu at the same layout, and against the emulated
# single rank. Tiny shapes (hidden 32, 2 layers, seq 16, 2 steps).
# Bound: losses 1e-6 relative, weights compare.py's 5e-5 L2; measured at
# most 1.22e-8 on the losses (CPU at 1 and 2 threads, OPENBLAS_CORETYPE
# Haswell and Sandybridge; docs/cuda.md), 2.2e-7 on the weights. Negative
# control: a run with lr 1% higher differs by 2.8e-5 and must fail. bf16
# compute under TP 2 + sp and PP 2 against the CPU mirror: 1e-3 (the
# issue's; measured 1.9e-5 and 5.6e-6 absolute on losses near 5.7). The
# metrics' tp_bytes (the device twin counted, sl_tpar_stats) equal the CPU's.
source "${SL_SRC:?}/tests/lib/run.sh" emu_par mpi numpy
emu_need # E: build/shardlm_emu (tests/lib/run.sh)
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
tiny_model "$W/tied" tied '"num_hidden_layers": 2'
tiny_data "$W/data"
A="--init random --data $W/data --data-order sequential --micro-batch 2 --seq-len 16 --threads 1 --summary false --plot false
  --peak-tflops 1 --zero 1 --compute-dtype fp32"
run() { # name np binary model [flags...] (2 steps unless flags say otherwise): emu_run with the model
  local n=$1 np=$2 bin=$3 m=$4
  shift 4
  emu_run "$n" "$np" "$bin" --steps 2 --model "$W/$m" "$@"
}
check() { emu_check "$@"; } # a b compare-flags...
fails() { # a b compare-flags...: the negative control
  if $CMP "$W/$1" "$W/$2" "${@:3}" > "$W/cmp.log" 2>&1; then bad "$1 vs $2 ${*:3} passed (should fail)"; else ok "$1 vs $2 ${*:3} fails"; fi
}
last() { # a b: the last step's losses within the bound (a resumed run logs its steps only)
  local x
  x=$("$PY" -c 'import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
r = abs(a["loss"] - b["loss"]) / abs(b["loss"])
print("step", a["step"], b["step"], "rel %.3g" % r, "ok" if a["step"] == b["step"] and r <= 1e-6 else "BAD")' \
    "$W/$1/metrics.jsonl" "$W/$2/metrics.jsonl")
  case $x in *ok) ok "$1 vs $2: $x" ;; *) bad "$1 vs $2: $x" ;; esac
}
tpbytes() { # a b: the metrics' tp_bytes (the device twin's and the host comm's counters) equal the CPU run's
  local x
  x=$("$PY" -c 'import json, sys
a, b = ([json.loads(l)["tp_bytes"] for l in open(f)] for f in sys.argv[1:])
print(a[-1], "ok" if a == b and sum(a[-1].values()) > 0 else "BAD: %s" % b[-1])' "$W/$1/metrics.jsonl" "$W/$2/metrics.jsonl")
  case $x in *ok) ok "$1 vs $2 tp_bytes: $x" ;; *) bad "$1 vs $2 tp_bytes: $x" ;; esac
}
R="--rtol 1e-6"
run e1 1 "$E" llama --backend cuda --save "$W/e1/model"
# TP 2, with and without sequence parallelism (the TP hooks on the device
# comm); the saved model (the TP gather of the device views) and a
# checkpoint (sl_tpar_ckpt_write of the staged state) at the end
run c_tp 2 "$B" llama --backend cpu --tp 2 --save "$W/c_tp/model" --ckpt-dir "$W/c_tp/ck"
run e_tp 2 "$E" llama --backend cuda --tp 2 --save "$W/e_tp/model" --ckpt-dir "$W/e_tp/ck" &&
  check e_tp c_tp $R && check e_tp e1 $R && tpbytes e_tp c_tp
run c_sp 2 "$B" llama --backend cpu --tp 2 --sequence-parallel
run e_sp 2 "$E" llama --backend cuda --tp 2 --sequence-parallel && check e_sp c_sp $R --loss-only &&
  check e_sp e1 $R --loss-only && tpbytes e_sp c_sp
# bf16 compute (bf16 storage and residual) under TP 2 + sp and PP 2: the
# device against the CPU mirror at the 1e-3 (measured below)
run c_tpb 2 "$B" llama --backend cpu --tp 2 --sequence-parallel --compute-dtype bf16
run e_tpb 2 "$E" llama --backend cuda --tp 2 --sequence-parallel --compute-dtype bf16 &&
  check e_tpb c_tpb --rtol 1e-3 --loss-only
run c_ppb 2 "$B" llama --backend cpu --pp 2 --grad-accum 2 --micro-batch 1 --compute-dtype bf16
run e_ppb 2 "$E" llama --backend cuda --pp 2 --grad-accum 2 --micro-batch 1 --compute-dtype bf16 &&
  check e_ppb c_ppb --rtol 1e-3 --loss-only
# the negative control: a run with lr 1% higher is outside the bound
run c_lr 2 "$B" llama --backend cpu --tp 2 --lr 3.03e-3 && fails e_tp c_lr $R --loss-only
# TP 4 over 2 k/v heads: each k/v slice on 2 ranks, its gradient summed
# over the TP group (llama.c kv_grad_sum); the save checks the copies agree
run c_tp4 4 "$B" llama --backend cpu --tp 4 --save "$W/c_tp4/model"
run e_tp4 4 "$E" llama --backend cuda --tp 4 --save "$W/e_tp4/model" && check e_tp4 c_tp4 $R && check e_tp4 e1 $R
# step 3 from the step-2 checkpoints: the device's resumed on the CPU, the
# CPU's on the device (sl_tpar_ckpt_read), both against 3 steps in one go
run c_tp3 2 "$B" llama --backend cpu --tp 2 --steps 3
run c_res 2 "$B" llama --backend cpu --tp 2 --steps 3 --resume --ckpt-dir "$W/e_tp/ck" && last c_res c_tp3
run e_res 2 "$E" llama --backend cuda --tp 2 --steps 3 --resume --ckpt-dir "$W/c_tp/ck" && last e_res c_tp3
# PP 2 (2 micro-batches of 1: the tokens of a step as above; transfers staged
# through the host): 1f1b and zb1p; tied embeddings under zb1p (the head's
# gradient part and the reduced sum between the end stages); TP 2 x PP 2
# (4 ranks, boundaries sent in TP slices and all-gathered)
P="--pp 2 --grad-accum 2 --micro-batch 1"
run e1g 1 "$E" llama --backend cuda --grad-accum 2 --micro-batch 1
for s in 1f1b zb1p; do # the saved model: each stage's units routed to rank 0
  run c_pp_$s 2 "$B" llama --backend cpu $P --pp-schedule $s --save "$W/c_pp_$s/model"
  run e_pp_$s 2 "$E" llama --backend cuda $P --pp-schedule $s --save "$W/e_pp_$s/model" &&
    check e_pp_$s c_pp_$s $R && check e_pp_$s e1g $R --loss-only
done
run c_ppt 2 "$B" tied --backend cpu $P --pp-schedule zb1p
run e_ppt 2 "$E" tied --backend cuda $P --pp-schedule zb1p && check e_ppt c_ppt $R --loss-only
run c_tpp 4 "$B" llama --backend cpu $P --tp 2
run e_tpp 4 "$E" llama --backend cuda $P --tp 2 && check e_tpp c_tpp $R --loss-only && check e_tpp e1g $R --loss-only
finish
