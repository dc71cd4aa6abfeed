#!/usr/bin/env bash
# Expert parallelism (--ep E; docs/moe.md): each MoE layer's experts split
# over E of the data-parallel ranks, tokens sent to their experts' ranks and
# back (shard/ep.c), expert tensors ZeRO-sharded over the ranks holding the
# same experts, dense tensors over all of them. Against one process (ZeRO 0,
# the same 12 samples a step): Mixtral (4 experts, top 2) at world 4 with
# EP 1, 2 and 4 under ZeRO-3, EP 2 under ZeRO 0 / 1 (bit-identical to ZeRO-3),
# hybrid sharding (--shard-group 2), full activation checkpointing,
# --no-sync-accum, world 2; Qwen3-MoE (norm_topk_prob) and Mixtral with the
# load-balancing loss at EP 2; all within 1e-5 (measured: losses 3.6e-09,
# weights 1.6e-07 relative L2). EP 2 equals EP 1 bit for bit at world 4
# (the same sums in the same order); EP 4 does not (an expert's weight
# gradient sums its rows rank by rank instead of in the reduce-scatter).
# A checkpoint written at EP 2 resumes at EP 1 and EP 4 (what they load is
# bit-identical to what EP 2 loads: SL_CKPT_DUMP) and continues within 1e-5
# of the uninterrupted run; a saved model reloads and saves byte-identically
# at EP 2. Negative control: SL_FAULT_EP_MISROUTE=1 (each rank runs the rows
# it receives through the wrong local expert) fails the comparison.
# EP 2 x PP 2 (1f1b, gpipe bit-identical to it, interleaved) and EP 2 with
# --moe-capacity-factor 1.0, the z-loss and bias balancing within 1e-5; the
# capacity bounds the received rows (a smaller acts arena than dropless).
# Weights are held to 1e-5 (the issue's figure; measured at most 6.2e-07
# under OPENBLAS_CORETYPE Haswell and Sandybridge), the routing options' runs
# to 2e-5 (measured 1.0e-06 at EP 2 x TP 2 under Sandybridge: 10x that).
# Tensor parallelism (each expert's w1|w3 column-split, w2 row-split, the
# router replicated; docs/moe.md): MoE at TP 2, EP 2 x TP 2 (with sequence
# parallelism, full checkpointing, the routing options, Qwen3-MoE, the aux
# loss), EP 4 x TP 2 and EP 2 x TP 2 x PP 2 at world 8; Nemotron-H with MoE
# layers at EP 2, EP 2 x TP 2 with SP, EP 2 x PP 2 zb1p and bias balancing at
# EP 2 (1e-5, the bias runs 2e-5; the bias in the step-3 manifest, the run
# resumed from it at EP 1 within 2e-5 of the uninterrupted EP 2 run); all within 1e-5 of
# one process (measured: losses 3.6e-09, weights 5.5e-07); a checkpoint
# written at EP 2 x TP 2 resumes at EP 1 x TP 2 and at EP 4 x TP 1.
# Refused by name: --ep not dividing the experts or the shard group, a dense
# model.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_ep mpi numpy
MOE='"num_hidden_layers": 2, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", '"$MOE"
tiny_model "$W/mixtral_aux" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", '"$MOE"',
 "output_router_logits": true, "router_aux_loss_coef": 0.5'
tiny_model "$W/qwen3moe" llama '"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2,
 "head_dim": 12, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": true'
# Nemotron-H with MoE layers (M*E-E: the sigmoid router, relu^2 experts, the shared expert; a dense '-' layer)
tiny_model "$W/nemotron_moe" nemotron_moe
# Granite 4.0-H with experts (each expert a slab of the fused input_linear / output_linear, the shared MLP beside)
tiny_model "$W/granite_moe" granite_moe
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
tiny_data "$W/data"
run() { arch_run "$@"; }     # arch name world micro accum [flags...] (tests/lib/run.sh)
check() { arch_check "$@"; } # arch a b [compare flags]
run mixtral base 1 3 4 --zero 0
run mixtral ep1 4 3 1 --zero 3 && check mixtral ep1 base --rtol 1e-5 --wtol 1e-5
for e in 2 4; do run mixtral ep$e 4 3 1 --zero 3 --ep $e && check mixtral ep$e base --rtol 1e-5 --wtol 1e-5; done
check mixtral ep2 ep1 --exact
for z in 0 1; do run mixtral ep2z$z 4 3 1 --zero $z --ep 2 && check mixtral ep2z$z ep2 --exact; done
run mixtral ep2hyb 4 3 1 --zero 3 --ep 2 --shard-group 2 && check mixtral ep2hyb base --rtol 1e-5 --wtol 1e-5
run mixtral ep2ac 4 3 1 --zero 3 --ep 2 --activation-checkpoint full && check mixtral ep2ac ep2 --exact
run mixtral ep2ns 4 3 1 --zero 2 --ep 2 --no-sync-accum && check mixtral ep2ns base --rtol 1e-5 --wtol 1e-5
run mixtral ep2w2 2 3 2 --zero 3 --ep 2 && check mixtral ep2w2 base --rtol 1e-5 --wtol 1e-5
# EP 2 x PP 2 (each stage's two ranks exchange its layers' tokens): 1f1b, gpipe (bit-identical to it), interleaved
run mixtral ep2pp2 4 3 2 --zero 3 --ep 2 --pp 2 && check mixtral ep2pp2 base --rtol 1e-5 --wtol 1e-5
run mixtral ep2pp2g 4 3 2 --ep 2 --pp 2 --pp-schedule gpipe && check mixtral ep2pp2g ep2pp2 --exact
run mixtral ep2pp2i 4 3 2 --ep 2 --pp 2 --pp-schedule interleaved --pp-virtual 2 && check mixtral ep2pp2i base --rtol 1e-5 --wtol 1e-5
for a in mixtral_aux qwen3moe; do
  run $a base 1 3 4 --zero 0
  run $a ep2 4 3 1 --zero 3 --ep 2 && check $a ep2 base --rtol 1e-5 --wtol 1e-5
done
# the routing options (a capacity that drops slots, the z-loss, bias balancing) under EP 2
RT="--moe-capacity-factor 1.0 --moe-z-loss-coef 0.01 --moe-balance bias --moe-bias-rate 0.01"
run mixtral rbase 1 3 4 --zero 0 $RT
run mixtral rep2 4 3 1 --zero 3 --ep 2 $RT && check mixtral rep2 rbase --rtol 1e-5 --wtol 2e-5
# a capacity bounds the rows an EP rank receives (E cap, not EP N k): the experts' buffers shrink
acts() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['arena_peak']['acts'])" "$W/mixtral-$1/metrics.jsonl"; }
a_cap=$(acts rep2) a_free=$(acts ep2)
[ "$a_cap" -lt "$a_free" ] && ok "a capacity of 1.0 bounds the received rows: acts $a_cap of $a_free bytes (dropless)" ||
  bad "a capacity does not shrink the acts arena at EP 2 ($a_cap vs $a_free bytes)"
# the plot draws the MoE panels the metrics have: load, router losses, dropped slots (none without a capacity)
"$B" plot "$W/mixtral-rep2/metrics.jsonl" "$W/rep2.svg" > /dev/null 2>&1 && "$B" plot "$W/mixtral-base/metrics.jsonl" \
  "$W/base.svg" > /dev/null 2>&1 && grep -q "expert load" "$W/rep2.svg" && grep -q "router z-loss" "$W/rep2.svg" &&
  grep -q "slots dropped" "$W/rep2.svg" && grep -q "expert load" "$W/base.svg" && ! grep -q "slots dropped" "$W/base.svg" &&
  ok "plot: the MoE panels where the metrics have them" || bad "plot: the MoE panels"
# tensor parallelism: MoE at TP 2; EP 2 x TP 2 (sp, full checkpointing, the routing options); EP 4 x TP 2; x PP 2
run mixtral tp2 2 3 4 --zero 3 --tp 2 && check mixtral tp2 base --rtol 1e-5 --wtol 1e-5
run mixtral ep2tp2 4 3 2 --zero 3 --ep 2 --tp 2 --sequence-parallel && check mixtral ep2tp2 base --rtol 1e-5 --wtol 1e-5
run mixtral ep2tp2ac 4 3 2 --zero 3 --ep 2 --tp 2 --activation-checkpoint full && check mixtral ep2tp2ac base --rtol 1e-5 --wtol 1e-5
run mixtral ep4tp2 8 3 1 --zero 3 --ep 4 --tp 2 && check mixtral ep4tp2 base --rtol 1e-5 --wtol 1e-5
run mixtral ep2tp2pp2 8 3 2 --zero 3 --ep 2 --tp 2 --pp 2 && check mixtral ep2tp2pp2 base --rtol 1e-5 --wtol 1e-5
run mixtral rtp 4 3 2 --zero 3 --ep 2 --tp 2 $RT && check mixtral rtp rbase --rtol 1e-5 --wtol 2e-5
for a in mixtral_aux qwen3moe; do run $a ep2tp2 4 3 2 --zero 3 --ep 2 --tp 2 --sequence-parallel && check $a ep2tp2 base --rtol 1e-5 --wtol 1e-5; done
# Nemotron-H with MoE layers among dense ones (companions of its E layers only): EP 2, EP 2 x TP 2 with SP,
# EP 2 x PP 2 under zb1p (the sparse MLP's split backward, its exchange plan stashed), bias balancing at EP 2
run nemotron_moe base 1 3 4 --zero 0
run nemotron_moe ep2 4 3 1 --zero 3 --ep 2 && check nemotron_moe ep2 base --rtol 1e-5 --wtol 1e-5
run nemotron_moe ep2tp2 4 3 2 --zero 3 --ep 2 --tp 2 --sequence-parallel && check nemotron_moe ep2tp2 base --rtol 1e-5 --wtol 1e-5
run nemotron_moe ep2zb 4 3 2 --zero 3 --ep 2 --pp 2 --pp-schedule zb1p && check nemotron_moe ep2zb base --rtol 1e-5 --wtol 1e-5
NB="--moe-balance bias --moe-bias-rate 0.01"
run nemotron_moe bbase 1 3 4 --zero 0 $NB
run nemotron_moe bep2 4 3 1 --zero 3 --ep 2 $NB && check nemotron_moe bep2 bbase --rtol 1e-5 --wtol 2e-5
if $CMP "$W/nemotron_moe-bbase" "$W/nemotron_moe-base" --rtol 1e-5 --wtol 1e-5 > "$W/nb.txt"; then
  bad "Nemotron-H: bias balancing does not change the run (the resume check below would be vacuous)"
else ok "Nemotron-H: bias balancing changes the run ($(cut -c1-60 "$W/nb.txt"))"; fi
# its expert bias (the model's e_score_correction_bias, updated) is checkpointed: EP 2 at step 3 resumed at EP 1
run nemotron_moe bck 4 3 1 --zero 3 --ep 2 $NB --steps 3 --ckpt-dir "$W/nck" --ckpt-every 3
run nemotron_moe bres 2 3 2 --zero 3 $NB --ckpt-dir "$W/nck" --resume &&
  grep -q "resumed from .* at step 3" "$W/nemotron_moe-bres.log" && check nemotron_moe bres bep2 --rtol 1e-5 --wtol 2e-5 --tail
# ... the manifest holds it: layers x experts, nonzero in the E layers (2, 4 of M*E-E), zero in the others
"$PY" -c "import json,sys,glob; b=json.load(open(glob.glob(sys.argv[1]+'/step-*/manifest.json')[0]))['moe_expert_bias']; rows=[b[4*l:4*l+4] for l in range(5)]; sys.exit(0 if len(b)==20 and all(any(rows[l]) for l in (2,4)) and not any(v for l in (0,1,3) for v in rows[l]) else 1)" "$W/nck" &&
  ok "Nemotron-H: the step-3 manifest holds the updated expert bias (E layers only)" ||
  bad "Nemotron-H: the step-3 manifest's expert bias ($(grep -o '"moe_expert_bias"[^]]*' "$W"/nck/step-*/manifest.json | cut -c1-120))"
# Granite 4.0-H with experts (this rank's slabs of each fused tensor): EP 2, EP 2 x TP 2 with SP (a slab's gate | up
# halves column-split), EP 2 x PP 2 under zb1p; a checkpoint at EP 2 x TP 2 (step 3) resumed at EP 1 x TP 2; the
# saved directory equal to the one process's (the slabs reassembled in expert order)
run granite_moe base 1 3 4 --zero 0
run granite_moe ep2 4 3 1 --zero 3 --ep 2 && check granite_moe ep2 base --rtol 1e-5 --wtol 1e-5
run granite_moe ep2tp2 4 3 2 --zero 3 --ep 2 --tp 2 --sequence-parallel && check granite_moe ep2tp2 base --rtol 1e-5 --wtol 1e-5
run granite_moe ep2zb 4 3 2 --zero 3 --ep 2 --pp 2 --pp-schedule zb1p && check granite_moe ep2zb base --rtol 1e-5 --wtol 1e-5
run granite_moe gck 4 3 2 --zero 3 --ep 2 --tp 2 --steps 3 --ckpt-dir "$W/gck" --ckpt-every 3
run granite_moe gres 2 3 4 --zero 3 --tp 2 --ckpt-dir "$W/gck" --resume &&
  grep -q "resumed from .* at step 3" "$W/granite_moe-gres.log" && check granite_moe gres base --rtol 1e-5 --wtol 1e-5 --tail
# negative control: the wrong local expert for the rows received
SL_FAULT_EP_MISROUTE=1 run mixtral mis 4 3 1 --zero 3 --ep 2 &&
  if $CMP "$W/mixtral-mis" "$W/mixtral-base" --rtol 1e-5 --wtol 1e-5 > "$W/mis.txt"; then bad "misrouted experts pass"; cat "$W/mis.txt"
  else ok "negative control: misrouted experts fail ($(cut -c1-90 "$W/mis.txt"))"; fi
# a checkpoint at EP 2 (step 3) resumed at EP 1, 2 and 4
run mixtral ck 4 3 1 --zero 3 --ep 2 --steps 3 --ckpt-dir "$W/ck" --ckpt-every 3
for e in 2 1 4; do
  rm -rf "$W/ck$e" && cp -r "$W/ck" "$W/ck$e"
  SL_CKPT_DUMP=$W/dump$e.safetensors run mixtral res$e 4 3 1 --zero 3 --ep $e --ckpt-dir "$W/ck$e" --resume &&
    grep -q "resumed from .* at step 3" "$W/mixtral-res$e.log" && check mixtral res$e ep2 --rtol 1e-5 --wtol 1e-5 --tail
done
for e in 1 4; do
  if cmp -s "$W/dump$e.safetensors" "$W/dump2.safetensors"; then ok "EP $e loads the EP 2 checkpoint as EP 2 does"
  else bad "EP $e loaded another state than EP 2 from the same checkpoint"; fi
done
# a checkpoint at EP 2 x TP 2 (step 3) resumed at EP 1 x TP 2 and EP 4 x TP 1
run mixtral cktp 4 3 2 --zero 3 --ep 2 --tp 2 --steps 3 --ckpt-dir "$W/cktp" --ckpt-every 3
for l in "1 2 4 3 2" "4 1 4 3 1"; do
  set -- $l; rm -rf "$W/cktp$1" && cp -r "$W/cktp" "$W/cktp$1"
  run mixtral restp$1 "$3" "$4" "$5" --zero 3 --ep "$1" --tp "$2" --ckpt-dir "$W/cktp$1" --resume &&
    grep -q "resumed from .* at step 3" "$W/mixtral-restp$1.log" && check mixtral restp$1 ep2tp2 --rtol 1e-5 --wtol 1e-5 --tail
done
# HF in and out: a trained model through an EP 2 run of 0 steps
$MPI -np 4 "$B" train --model "$W/mixtral-base/model" --data "$W/data" --steps 0 --seq-len 16 --micro-batch 3 \
  --threads 1 --summary false --plot false --zero 3 --ep 2 --out-dir "$W/rt" --save "$W/rt/model" > "$W/rt.log" 2>&1 &&
  cmp -s "$W/rt/model/model.safetensors" "$W/mixtral-base/model/model.safetensors" &&
  ok "HF round trip at EP 2: byte-identical" || { bad "HF round trip at EP 2"; tail -3 "$W/rt.log"; }
$MPI -np 4 "$B" train --model "$W/mixtral-base/model" --data "$W/data" --steps 0 --seq-len 16 --micro-batch 3 \
  --threads 1 --summary false --plot false --zero 3 --ep 2 --tp 2 --out-dir "$W/rttp" --save "$W/rttp/model" > "$W/rttp.log" 2>&1 &&
  cmp -s "$W/rttp/model/model.safetensors" "$W/mixtral-base/model/model.safetensors" &&
  ok "HF round trip at EP 2 x TP 2: byte-identical" || { bad "HF round trip at EP 2 x TP 2"; tail -3 "$W/rttp.log"; }
refuse() { # name world needle flags...
  local n=$1 np=$2 needle=$3 model=$4; shift 4
  $MPI -np "$np" "$B" train --model "$W/$model" --init random --data "$W/data" --steps 1 --seq-len 16 --micro-batch 2 --threads 1 \
    --summary false --plot false --out-dir "$W/refused" "$@" > "$W/refused.log" 2>&1
  rc_is "$n" $? 2 "$W/refused.log" "$needle"
}
refuse "--ep 3 of 4 experts" 3 "does not divide the number of experts" mixtral --ep 3
refuse "--ep 4 over a shard group of 2" 4 "--ep 4 must divide the ranks a tensor is sharded over" mixtral --ep 4 --shard-group 2
refuse "--ep 2 on a dense model" 2 "the model has no experts" llama --ep 2
finish
