#!/usr/bin/env bash
# Mamba v1 under tensor parallelism (--tp T, issue 13; models/mamba.c
# "Tensor parallelism", docs/models.md) against one process: TP 2 and 4, with
# DP 1 and 2, ZeRO 0/1/3, grad accumulation, selective and full activation
# checkpointing (full repeats the x_proj all-reduce when it recomputes a
# block), sequence parallelism on and off, tied (no biases) and untied with
# use_bias (in_proj's stacked x | z bias slices, the replicated out_proj bias
# added once) and no conv bias, both with an odd vocabulary (211: the
# vocabulary-parallel embedding and head pad it to 212 at T = 2 and 4):
# per-step losses, gradient norms and the exported weights (--save assembles
# in_proj's two stacked halves and the row slices of x_proj / out_proj into
# whole HF tensors) within 1e-5 relative over 10 steps. Every --save at T > 1
# also checks that the TP ranks' copies of the replicated tensors (norms,
# embedding, head, out_proj bias) are the same bits.
# Also: loading HF weights by slices (each rank reads its rows of both halves
# of in_proj), a checkpoint saved at TP 2 x DP 2 resumed at TP 4 x DP 1, the
# TP bytes per step against their closed form from config.json, the planner's
# engine check against the SP runs, and the refusal of a T that does not
# divide d_inner.
# --eps 1e-6: as tests/cli/tp/test_tp_parity.sh (Adam's gain on round-off of
# gradients of ~1e-9 would otherwise dominate the comparison).
source "${SL_SRC:?}/tests/lib/run.sh" tp_mamba mpi numpy
tiny_model "$W/mt" mamba '"num_hidden_layers": 2, "vocab_size": 211'
tiny_model "$W/mu" mamba '"num_hidden_layers": 2, "state_size": 6, "conv_kernel": 3, "time_step_rank": 3,
 "vocab_size": 211, "use_bias": true, "use_conv_bias": false, "tie_word_embeddings": false, "layer_norm_epsilon": null'
# byte tokens only (no end-of-document id), all below the vocabulary of 211
# (prepare inline: tiny_data has no --no-append-eod)
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data" --no-append-eod > /dev/null || exit 1
COMMON="--init random --data $W/data --data-order sequential --steps 10 --seq-len 16 --lr 1e-3 --eps 1e-6 \
  --warmup 3 --clip 0.5 --weight-decay 0.1 --threads 1 --summary false --plot false --log-every 100"
# train NAME MODEL WORLD MICRO ACCUM BASE [flags...]: one run (G = micro x accum x world / tp = 4, 10 steps)
# with --save; then, unless BASE is -, its losses and weights (compare.py) and gradient norms (each
# parameter counted once) against run BASE's, 1e-5 relative. Counts a pass or a failure either way.
train() {
  local name=$1 model=$2 np=$3 mb=$4 ga=$5 base=$6; shift 6
  if ! $MPI -np "$np" "$B" train $COMMON --model "$W/$model" --micro-batch "$mb" --grad-accum "$ga" \
      --out-dir "$W/$name" --save "$W/$name/model" "$@" > "$W/$name.log" 2>&1; then
    bad "run $name"; tail -5 "$W/$name.log"; return 1
  fi
  [ "$base" = - ] && return 0
  if $CMP "$W/$name" "$W/$base" --rtol 1e-5 && "$PY" - "$W/$name/metrics.jsonl" "$W/$base/metrics.jsonl" <<'P'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
d = max(abs(x["grad_norm"] - y["grad_norm"]) / y["grad_norm"] for x, y in zip(a, b))
print(f"     grad_norm: worst relative diff {d:.3g}")
sys.exit(0 if len(a) == len(b) == 10 and d <= 1e-5 else 1)
P
  then pass=$((pass+1)); else fail=$((fail+1)); return 1; fi
}
# tied, no in/out_proj biases, conv bias: d_inner 64
train tbase mt 1 4 1 - --zero 0
train t_tp2 mt 2 4 1 tbase --tp 2 --zero 0
train t_tp4 mt 4 4 1 tbase --tp 4 --zero 3
train t_tp2sel mt 2 2 2 tbase --tp 2 --zero 3 --activation-checkpoint selective
train t_tp2full mt 2 2 2 tbase --tp 2 --zero 3 --activation-checkpoint full
# sequence parallelism: TP 2 x DP 2 with ZeRO-3 and grad accumulation (this layout without SP, TP 2 x
# DP 2 ZeRO-0 with accumulation, was a case of its own: u_tp2dp2z0 has its layout, t_tp2sel / t_tp2full
# its accumulation at TP 2); with full checkpointing (the recomputed block all-gathers its norm again)
train s_tp2dp2 mt 4 1 2 tbase --tp 2 --zero 3 --sequence-parallel
train s_tp2full mt 2 2 2 tbase --tp 2 --zero 0 --sequence-parallel --activation-checkpoint full
# untied, use_bias, no conv bias, R 3, S 6
train ubase mu 1 4 1 - --zero 0
train u_tp4 mu 4 4 1 ubase --tp 4 --zero 1
train u_tp2dp2z0 mu 4 2 1 ubase --tp 2 --zero 0
train s_tp4u mu 4 4 1 ubase --tp 4 --zero 1 --sequence-parallel
# from HF weights: each rank reads its rows of in_proj's x and z halves, of conv1d, dt_proj, A_log, D,
# and its columns of x_proj and out_proj
train ud1 ubase/model 1 4 1 - --zero 0 --init hf
train ud_tp4 ubase/model 4 4 1 ud1 --tp 4 --zero 3 --init hf

# The TP axis's bytes per step (metrics "tp_bytes") against the closed form from config.json.
# Convention (shard/comm.c): an all-reduce of n elements is counted as 2*(T-1)*ceil(n/T) of them, an
# all-gather or reduce-scatter with blocks of k elements as (T-1)*k. Per layer per micro-batch
# (N = b*s tokens): the all-reduces of x_proj's output (N, R + 2S) forward and of its gradient
# backward (full checkpointing repeats the forward one); without sequence parallelism also the
# all-reduces of out_proj's output (N, h) and in_proj's input gradient (N, h); with it instead an
# all-gather before in_proj and a reduce-scatter after out_proj of (N/T, h) blocks each way (full
# checkpointing all-gathers again) and the all-reduce of the norm's gradient (h). Embedding and head
# (models/vocab_parallel.h): without SP the embedding all-reduces (N, h), the head all-gathers the
# N row maxima, all-reduces (N, 2) and, backward, (N, h); with SP the embedding reduce-scatters
# (N, h) and all-gathers it back, the head all-gathers (N, h) and the N maxima, all-reduces (N, 2),
# reduce-scatters (N, h) and all-reduces the final norm's gradient (h). The gradient norm all-gathers
# one double. And the activation arena's peak (no checkpointing) against docs/models.md's table at
# D/T channels: per layer N*(h + 7D/T + R + 2S) + n + b*ceil(s/64)*(D/T)*S (ln all-gathered, rstd on
# the stream's n rows (N/T under SP), dtr | bc whole on every rank; xz, xcp, u, dtv, y, g and the
# scan checkpoints split), plus the stream (L+1)*n*h and the head's lnf (N, h) and 3 N-vectors.
closed() { # run model T micro accum sp [full]
  "$PY" - "$W/$1/metrics.jsonl" "$W/$2/config.json" "$3" "$4" "$5" "$6" "${7:-0}" <<'P'
import json, math, sys
m, c, T, b, ga, sp, full = sys.argv[1], json.load(open(sys.argv[2])), *map(int, sys.argv[3:8])
h, L, S, R, s, E = c["hidden_size"], c["num_hidden_layers"], c["state_size"], c["time_step_rank"], 16, 4
N = b * s
ar = lambda n: 2 * (T - 1) * math.ceil(n / T) * E
blk = lambda n: (T - 1) * (n // T) * E
x = ar(N * (R + 2 * S)) * (3 if full else 2)
if sp:
    assert (N * h) % T == 0
    want = {"allgather": ga * (L * (3 if full else 2) * blk(N * h) + 2 * blk(N * h) + (T - 1) * N * E) + 8 * (T - 1),
            "reduce_scatter": ga * (L * 2 * blk(N * h) + 2 * blk(N * h)),
            "allreduce": ga * (L * (x + ar(h)) + ar(2 * N) + ar(h))}
else:
    want = {"allgather": ga * (T - 1) * N * E + 8 * (T - 1), "reduce_scatter": 0,
            "allreduce": ga * (L * (x + 2 * ar(N * h)) + 2 * ar(N * h) + ar(2 * N))}
got = [json.loads(l)["tp_bytes"] for l in open(m)]
ok = len(got) == 10 and all(g == want for g in got)
n, D = N // T if sp else N, c["expand"] * h // T
acts = E * (L * (N * (h + 7 * D + R + 2 * S) + n + b * math.ceil(s / 64) * D * S) + (L + 1) * n * h + N * h + 3 * N)
got_acts = json.loads(open(m).readlines()[-1])["arena_peak"]["acts"]
ok &= full or got_acts == acts
print(f"{'OK  ' if ok else 'FAIL'} {sys.argv[1]}: tp_bytes per step {got[0]}, closed form {want}"
      + ("" if full else f"; activation peak {got_acts} B, closed form {acts} B"))
sys.exit(0 if ok else 1)
P
}
for r in "t_tp2 mt 2 4 1 0" "t_tp4 mt 4 4 1 0" "u_tp4 mu 4 4 1 0" "u_tp2dp2z0 mu 2 2 1 0" "t_tp2full mt 2 2 2 0 1" \
         "s_tp2dp2 mt 2 1 2 1" "s_tp4u mu 4 4 1 1" "s_tp2full mt 2 2 2 1 1"; do
  if closed $r; then pass=$((pass+1)); else fail=$((fail+1)); fi
done

# The planner's engine check (shardlm plan --engine-check: the model's code on a counting TP
# communicator, one process) predicts the SP runs' TP bytes per kind and arena peaks exactly (scratch
# aside: the kernels' own scratch is outside the plan's arenas).
engine_check() { # run model world micro accum [train flags...]
  local name=$1 model=$2 np=$3 mb=$4 ga=$5; shift 5
  "$B" plan --engine-check --model "$W/$model" --world "$np" --micro-batch "$mb" --grad-accum "$ga" --seq-len 16 \
    "$@" --json > "$W/$name.plan" 2> "$W/$name.plan.err" && "$PY" - "$W/$name.plan" "$W/$name/metrics.jsonl" <<'P'
import json, sys
p, m = json.load(open(sys.argv[1])), [json.loads(l) for l in open(sys.argv[2])]
strip = lambda d: {k: v for k, v in d.items() if k != "scratch"}
ok = all(x["tp_bytes"] == p["tp_bytes"] for x in m) and strip(m[-1]["arena_peak"]) == strip(p["arena_peak"])
print(f"{'OK  ' if ok else 'FAIL'} plan --engine-check vs {sys.argv[2]}: tp_bytes {p['tp_bytes']}, arena peaks {strip(p['arena_peak'])}")
sys.exit(0 if ok else 1)
P
}
if engine_check s_tp2dp2 mt 4 1 2 --tp 2 --sequence-parallel --zero 3 &&
   engine_check s_tp4u mu 4 4 1 --tp 4 --sequence-parallel --zero 1; then
  pass=$((pass+1)); else bad "plan --engine-check under SP"; fi

# Checkpoints hold whole tensors (in_proj's halves assembled): saved at TP 2 x DP 2 (ZeRO-3; also that
# layout's parity case), resumed from step 5 at TP 4 x DP 1; the continued losses and the final weights
# match the uninterrupted run to 1e-5.
train ck_full mt 4 2 1 tbase --tp 2 --zero 3 --ckpt-dir "$W/ck" --ckpt-every 5 --keep-last 0
rm -rf "$W/ck/step-000010" "$W/ck/latest"
# the uninterrupted run's steps 6..10 beside its weights, for compare.py
mkdir -p "$W/ck_tail" && ln -s "$W/ck_full/model" "$W/ck_tail/model"
"$PY" -c 'import json, sys; [print(l, end="") for l in open(sys.argv[1]) if json.loads(l)["step"] > 5]' \
  "$W/ck_full/metrics.jsonl" > "$W/ck_tail/metrics.jsonl"
if train ck_tp4 mt 4 4 1 - --tp 4 --zero 0 --ckpt-dir "$W/ck" --resume && grep -q "resumed from .* at step 5" "$W/ck_tp4.log" &&
  [ "$(grep -c '"step": ' "$W/ck_tp4/metrics.jsonl")" = 5 ] && $CMP "$W/ck_tp4" "$W/ck_tail" --rtol 1e-5; then
  pass=$((pass+1))
else
  bad "resume at TP 4"
fi

# refusal: T not dividing d_inner (exit 2, naming the size and the valid --tp values)
$MPI -np 3 "$B" train $COMMON --model "$W/mt" --micro-batch 1 --tp 3 --out-dir "$W/refuse" > "$W/refuse.log" 2>&1
rc=$?
needle="intermediate_size (d_inner = expand x hidden_size) 64 is not divisible by --tp 3; valid --tp values for this model: 1, 2, 4, 8, 16, 32, 64"
if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/refuse.log"; then
  ok "refusal: $(grep -F -- "$needle" "$W/refuse.log" | head -1 | sed 's/^\[rank [0-9]*\] //')"
else
  bad "refusal (exit $rc, wanted 2 and '$needle')"; tail -3 "$W/refuse.log"
fi
finish
