#!/usr/bin/env bash
# Mamba-2 under tensor parallelism (--tp T: heads and their B/C groups over
# the TP ranks; models/mamba2.c above m2_spec, docs/models.md) against one
# process: TP 2 and 4, DP 1 and 2, ZeRO 0/1/3, grad accumulation, selective
# and full checkpointing, sequence parallelism on and off, untied with
# use_bias and no conv bias (in_proj's five parts and the conv's three split
# part by part, the replicated out_proj bias added once), an odd vocabulary
# (211: the vocabulary-parallel embedding and head pad it): per-step losses,
# gradient norms and the exported weights (--save assembles the parts into
# whole HF tensors) within 1e-5 relative over 10 steps. Every --save at T > 1
# also checks that the TP ranks' copies of the replicated tensors are the
# same bits. Also: loading HF weights by slices, a checkpoint saved at TP 2 x
# DP 2 resumed at TP 4 x DP 1 and at TP 1 (its continued losses and final
# weights equal the uninterrupted run's), the planner's engine check against
# an SP run, and the refusal of a T that does not divide n_groups.
# The same suite runs on Nemotron-H (M * M - layers: the Mamba-2 mixer
# beside attention without RoPE, GQA 4 heads / 2 KV heads, so TP 4 shares a
# K/V slice, and the squared-ReLU MLP with mlp_bias; no attention_bias: without
# RoPE the key bias gets no gradient but rounding, on which Adam drifts): the
# decoder's layers of two kinds under every layout above.
# Groups shared by TP ranks (n_groups < --tp: each group's B/C rows of in_proj
# and conv channels replicated over the --tp / n_groups ranks holding its
# heads, their gradients summed over those ranks; the gated norm's per-group
# sums of squares and backward dot products summed over them): Mamba-2 and
# Nemotron-H at n_groups 1 (conv bias on; in_proj's bias only at n_groups 2:
# at n_groups 1 Adam's noise on its small gradients measured 8e-6 against
# the 5e-5 bound, under 10x) at TP 2 with and without SP, with
# full checkpointing, with --no-sync-accum (against one process with it),
# at TP 4 under SP, from HF weights read by slices, and Mamba-2 at n_groups
# 2 under TP 4 (two groups, two ranks each), same 1e-5 bounds. Negative
# control: SL_FAULT_M2_NORM_LOCAL=1 (each rank normalises by its own
# channels' statistics) must fail the comparison. Refusals: num_heads not
# divisible by --tp, n_groups neither dividing nor divisible by it.
# --eps 1e-6: as tests/cli/tp/test_tp_mamba.sh.
source "${SL_SRC:?}/tests/lib/run.sh" tp_mamba2 mpi numpy
tiny_model "$W/m" mamba '"num_hidden_layers": 2, "vocab_size": 211, "architectures": ["Mamba2ForCausalLM"],
 "num_heads": 8, "head_dim": 8, "n_groups": 4, "state_size": 6, "conv_kernel": 3, "time_step_rank": null,
 "use_bias": true, "use_conv_bias": false, "tie_word_embeddings": false, "time_step_limit": [0.001, 0.08]'
for g in 1 2; do
  tiny_model "$W/g$g" mamba '"num_hidden_layers": 2, "vocab_size": 211, "architectures": ["Mamba2ForCausalLM"],
 "num_heads": 8, "head_dim": 8, "n_groups": '$g', "state_size": 6, "conv_kernel": 3, "time_step_rank": null,
 "use_bias": '$([ $g = 2 ] && echo true || echo false)', "use_conv_bias": true, "tie_word_embeddings": false,
 "time_step_limit": [0.001, 0.08]'
done
tiny_model "$W/nh1" mamba '"num_hidden_layers": 4, "vocab_size": 211, "architectures": ["NemotronHForCausalLM"],
 "hybrid_override_pattern": "M*M-", "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 1, "ssm_state_size": 6, "state_size": null,
 "expand": null, "conv_kernel": 3, "time_step_rank": null, "use_bias": false, "use_conv_bias": true,
 "mlp_bias": true, "tie_word_embeddings": false, "time_step_limit": [0.001, 0.08]'
tiny_model "$W/g3" mamba '"num_hidden_layers": 1, "vocab_size": 211, "architectures": ["Mamba2ForCausalLM"],
 "num_heads": 6, "head_dim": 8, "n_groups": 3, "state_size": 6, "conv_kernel": 3, "time_step_rank": null,
 "expand": 2, "hidden_size": 24'
tiny_model "$W/nh" mamba '"num_hidden_layers": 4, "vocab_size": 211, "architectures": ["NemotronHForCausalLM"],
 "hybrid_override_pattern": "M*M-", "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 4, "ssm_state_size": 6, "state_size": null,
 "expand": null, "conv_kernel": 3, "time_step_rank": null, "use_bias": true, "use_conv_bias": false,
 "mlp_bias": true, "tie_word_embeddings": false, "time_step_limit": [0.001, 0.08]'
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data" --no-append-eod > /dev/null || exit 1
COMMON="--init random --data $W/data --data-order sequential --steps 10 --seq-len 16 --lr 1e-3 --eps 1e-6 \
  --warmup 3 --clip 0.5 --weight-decay 0.1 --threads 1 --summary false --plot false --log-every 100"
# train NAME MODEL WORLD MICRO ACCUM BASE [flags...]: one run (G = micro x accum x world / tp = 4, 10 steps)
# with --save; then, unless BASE is -, its losses and weights (compare.py) and gradient norms against run
# BASE's, 1e-5 relative. Counts a pass or a failure either way.
train() {
  local name=$1 model=$2 np=$3 mb=$4 ga=$5 base=$6
  shift 6
  if ! $MPI -np "$np" "$B" train $COMMON --model "$W/$model" --micro-batch "$mb" --grad-accum "$ga" \
    --out-dir "$W/$name" --save "$W/$name/model" "$@" > "$W/$name.log" 2>&1; then
    bad "run $name"
    tail -5 "$W/$name.log"
    return 1
  fi
  [ "$base" = - ] && return 0
  if $CMP "$W/$name" "$W/$base" --rtol 1e-5 && "$PY" - "$W/$name/metrics.jsonl" "$W/$base/metrics.jsonl" << 'P'; then
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
d = max(abs(x["grad_norm"] - y["grad_norm"]) / y["grad_norm"] for x, y in zip(a, b))
print(f"     grad_norm: worst relative diff {d:.3g}")
sys.exit(0 if len(a) == len(b) == 10 and d <= 1e-5 else 1)
P
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    return 1
  fi
}
for M in m nh; do # Mamba-2, then Nemotron-H
  train ${M}_base $M 1 4 1 - --zero 0
  train ${M}_tp2 $M 2 4 1 ${M}_base --tp 2 --zero 0
  train ${M}_tp4 $M 4 4 1 ${M}_base --tp 4 --zero 3
  train ${M}_tp2sel $M 2 2 2 ${M}_base --tp 2 --zero 3 --activation-checkpoint selective
  train ${M}_tp2full $M 2 2 2 ${M}_base --tp 2 --zero 1 --activation-checkpoint full
  train ${M}_sp2dp2 $M 4 1 2 ${M}_base --tp 2 --zero 3 --sequence-parallel
  train ${M}_sp4 $M 4 4 1 ${M}_base --tp 4 --zero 1 --sequence-parallel --activation-checkpoint full
  # from HF weights: each rank reads its rows of every part of in_proj and the conv, its heads' dt_bias,
  # A_log, D, its channels of the gated norm and its columns of out_proj
  train ${M}_hf1 ${M}_base/model 1 4 1 - --zero 0 --init hf
  train ${M}_hf_tp4 ${M}_base/model 4 4 1 ${M}_hf1 --tp 4 --zero 3 --init hf

  # the planner's engine check predicts an SP run's TP bytes and arena peaks exactly (the kernels' scratch aside)
  "$B" plan --engine-check --model "$W/$M" --world 4 --micro-batch 1 --grad-accum 2 --seq-len 16 --tp 2 \
    --sequence-parallel --zero 3 --json > "$W/${M}_sp.plan" 2> "$W/${M}_sp.plan.err" &&
    "$PY" - "$W/${M}_sp.plan" "$W/${M}_sp2dp2/metrics.jsonl" << 'P'
import json, sys
p, m = json.load(open(sys.argv[1])), [json.loads(l) for l in open(sys.argv[2])]
strip = lambda d: {k: v for k, v in d.items() if k != "scratch"}
ok = all(x["tp_bytes"] == p["tp_bytes"] for x in m) and strip(m[-1]["arena_peak"]) == strip(p["arena_peak"])
print(f"{'OK  ' if ok else 'FAIL'} plan --engine-check vs the SP run: tp_bytes {p['tp_bytes']}")
sys.exit(0 if ok else 1)
P
  [ $? = 0 ] && pass=$((pass + 1)) || bad "$M: plan --engine-check under SP"

  # Checkpoints hold whole tensors (the parts assembled): saved at TP 2 x DP 2 (ZeRO-3), resumed from step 5
  # at TP 4 x DP 1 and at TP 1; the continued losses and the final weights match the uninterrupted run.
  train ${M}_ck_full $M 4 2 1 ${M}_base --tp 2 --zero 3 --ckpt-dir "$W/${M}_ck" --ckpt-every 5 --keep-last 0
  rm -rf "$W/${M}_ck/step-000010" "$W/${M}_ck/latest"
  mkdir -p "$W/${M}_ck_tail" && ln -s "$W/${M}_ck_full/model" "$W/${M}_ck_tail/model"
  "$PY" -c 'import json, sys; [print(l, end="") for l in open(sys.argv[1]) if json.loads(l)["step"] > 5]' \
    "$W/${M}_ck_full/metrics.jsonl" > "$W/${M}_ck_tail/metrics.jsonl"
  for lay in "${M}_ck_tp4 4 4 --tp 4 --zero 0" "${M}_ck_tp1 1 4 --zero 1"; do
    set -- $lay
    n=$1 np=$2 mb=$3
    shift 3
    cp -r "$W/${M}_ck" "$W/ck_$n"
    if train "$n" $M "$np" "$mb" 1 - "$@" --ckpt-dir "$W/ck_$n" --resume && grep -q "resumed from .* at step 5" "$W/$n.log" &&
      [ "$(grep -c '"step": ' "$W/$n/metrics.jsonl")" = 5 ] && $CMP "$W/$n" "$W/${M}_ck_tail" --rtol 1e-5; then
      pass=$((pass + 1))
    else
      bad "resume $n"
    fi
  done

  # refusal: T not dividing n_groups (exit 2, naming it and the valid --tp values)
  $MPI -np 3 "$B" train $COMMON --model "$W/$M" --micro-batch 1 --tp 3 --out-dir "$W/${M}_refuse" > "$W/${M}_refuse.log" 2>&1
  rc=$?
  needle="num_heads 8 is not divisible by --tp 3 (n_groups 4)"
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/${M}_refuse.log" && grep -qF "valid --tp values for this model: 1, 2, 4, 8" "$W/${M}_refuse.log"; then
    ok "refusal: $(grep -F -- "$needle" "$W/${M}_refuse.log" | head -1 | sed 's/^\[rank [0-9]*\] //')"
  else
    bad "refusal (exit $rc, wanted 2 and '$needle')"
    tail -3 "$W/${M}_refuse.log"
  fi
done

# n_groups < --tp: a group's B/C replicated over the ranks holding its heads, the gated norm's sums summed over them
for M in g1 nh1; do
  train ${M}_base $M 1 4 1 - --zero 0
  train ${M}_tp2 $M 2 4 1 ${M}_base --tp 2 --zero 0
  train ${M}_tp2sp $M 2 4 1 ${M}_base --tp 2 --zero 1 --sequence-parallel
  train ${M}_tp2full $M 2 2 2 ${M}_base --tp 2 --zero 3 --activation-checkpoint full
  train ${M}_tp2spfull $M 2 2 2 ${M}_base --tp 2 --zero 1 --sequence-parallel --activation-checkpoint full
  train ${M}_sp4 $M 4 4 1 ${M}_base --tp 4 --zero 3 --sequence-parallel
  train ${M}_hf1 ${M}_base/model 1 4 1 - --zero 0 --init hf
  train ${M}_hf_tp2 ${M}_base/model 2 4 1 ${M}_hf1 --tp 2 --zero 0 --init hf
  # --no-sync-accum: the replicated gradients' TP sum takes only the micro-batch's part
  train ${M}_nbase $M 1 2 2 - --zero 0 --no-sync-accum
  train ${M}_ns2 $M 2 2 2 ${M}_nbase --tp 2 --zero 0 --no-sync-accum --sequence-parallel
  # negative control: each rank's statistics of its own channels only
  if SL_FAULT_M2_NORM_LOCAL=1 $MPI -np 2 "$B" train $COMMON --model "$W/$M" --micro-batch 4 --grad-accum 1 --tp 2 \
    --zero 0 --out-dir "$W/${M}_fault" --save "$W/${M}_fault/model" > "$W/${M}_fault.log" 2>&1 &&
    ! $CMP "$W/${M}_fault" "$W/${M}_base" --rtol 1e-5 > "$W/${M}_fault.cmp" 2>&1; then
    ok "negative control $M: the gated norm without its TP sum differs: $(grep -o 'worst loss diff [^,]*' "$W/${M}_fault.cmp")"
  else
    bad "negative control $M (SL_FAULT_M2_NORM_LOCAL=1 should fail the comparison)"
  fi
done
train g2_base g2 1 4 1 - --zero 0
train g2_tp4 g2 4 4 1 g2_base --tp 4 --zero 1
# refusals naming the fields: num_heads 8 / --tp 3; n_groups 3 and --tp 2 (num_heads 6 divisible)
for lay in "g1 3 num_heads 8 is not divisible by --tp 3 (n_groups 1)" "g3 2 n_groups 3 is neither divisible by --tp 2 nor divides it"; do
  set -- $lay
  M=$1 np=$2
  shift 2
  $MPI -np $np "$B" train $COMMON --model "$W/$M" --micro-batch 1 --tp $np --out-dir "$W/${M}_ref$np" > "$W/${M}_ref$np.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$*" "$W/${M}_ref$np.log"; then
    ok "refusal: $(grep -F -- "$*" "$W/${M}_ref$np.log" | head -1 | sed 's/^\[rank [0-9]*\] //')"
  else
    bad "refusal $M --tp $np (exit $rc, wanted 2 and '$*')"
    tail -3 "$W/${M}_ref$np.log"
  fi
done
finish
