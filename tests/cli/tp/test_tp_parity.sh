#!/usr/bin/env bash
# Tensor parallelism (--tp T, Megatron-style, issue 13) against one process:
# TP 2 and 4, with DP 1 and 2, ZeRO 0/1/3, grad accumulation, full
# activation checkpointing (the recomputation repeats the TP all-reduces),
# GQA with fewer KV heads than T (a KV group replicated over T/nkv ranks),
# Mistral's window, tied and untied embeddings, the vocabulary-parallel
# embedding and loss-parallel head with an odd vocabulary (211: padded at
# T = 2 and 4), sequence parallelism (--sequence-parallel): per-step losses and the
# exported weights (--save gathers the slices into whole HF tensors) within
# 1e-5 relative over 10 steps, and so the gradient norms (each parameter
# counted once: a replicated tensor on the first TP rank holding it).
# Every --save at T > 1 also checks that the TP ranks' copies of every
# replicated tensor (norms, embedding, head, shared KV slices) are the same
# bits (models/model.c refuses the save otherwise), so those runs prove
# replicated weights stay bit-equal.
# Also: loading HF weights by slices, the held-out loss, the TP bytes per
# step against their closed form, checkpoints resharded across TP x DP
# layouts (resume and convert). Then the start-up refusals (exit 2, a
# message naming the size and the valid --tp values).
#
# --eps 1e-6: a handful of weights get gradients of ~1e-9, where Adam's
# m / (sqrt(v) + eps) with the default eps 1e-8 turns round-off of the
# gradient into a full lr-sized step (DP 2 alone moves such a weight by
# 5e-6 relative, TP by 2e-5); eps 1e-6 damps those steps, so the test sees
# the forward / backward / reduction and not Adam's gain on noise.
source "${SL_SRC:?}/tests/lib/run.sh" tp_parity mpi numpy
L48='"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2'
tiny_model "$W/llama" llama "$L48"
tiny_model "$W/mistral" mistral '"hidden_size": 48, "num_key_value_heads": 1, "num_hidden_layers": 2,
 "tie_word_embeddings": true'
# no norm epsilon, no tie_word_embeddings key: the model's defaults
tiny_model "$W/mamba" mamba '"num_hidden_layers": 1, "layer_norm_epsilon": null, "tie_word_embeddings": null'
# 2 heads, no KV heads, epsilon, rope_theta or tie key: the defaults
tiny_model "$W/nh2" llama '"num_attention_heads": 2, "num_hidden_layers": 1, "num_key_value_heads": null,
 "rms_norm_eps": null, "rope_theta": null, "tie_word_embeddings": null'
# odd vocabularies: 211 = 4 x 53 - 1 (T = 2 and 4 pad one slice), untied with GQA, tied
tiny_model "$W/v211u" llama "$L48"', "vocab_size": 211'
tiny_model "$W/v211t" tied "$L48"', "vocab_size": 211'
tiny_data "$W/data"
# the same ASCII text without the byte tokenizer's end-of-document 256: every id < 211
# (prepare inline: tiny_data has no --no-append-eod)
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data211" --no-append-eod > /dev/null || exit 1
COMMON="--init random --data $W/data --data-order sequential --steps 10 --seq-len 16 --lr 1e-3 --eps 1e-6 \
  --warmup 3 --clip 0.5 --threads 1 --summary false --plot false --log-every 100"
run() { # name model world micro accum [flags...]  (G = micro x accum x world / tp = 4)
  local name=$1 model=$2 np=$3 mb=$4 ga=$5; shift 5
  $MPI -np "$np" "$B" train $COMMON --model "$W/$model" --micro-batch "$mb" --grad-accum "$ga" \
    --out-dir "$W/$name" --save "$W/$name/model" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "run $name (exit $rc)"; tail -5 "$W/$name.log"; return 1; fi
}
check() { # a b: losses and weights (compare.py), and the gradient norms (each parameter counted once)
  if $CMP "$W/$1" "$W/$2" --rtol 1e-5 && "$PY" - "$W/$1/metrics.jsonl" "$W/$2/metrics.jsonl" <<'P'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
worst = {}
for k in ("grad_norm", "eval_loss"):  # eval_loss: the held-out loss, where the runs evaluate
    d = [abs(x[k] - y[k]) / y[k] for x, y in zip(a, b) if k in x or k in y]
    if d: worst[k] = max(d)
print("     " + ", ".join(f"{k}: worst relative diff {v:.3g}" for k, v in worst.items()))
sys.exit(0 if len(a) == len(b) and max(worst.values()) <= 1e-5 else 1)
P
  then pass=$((pass+1)); else fail=$((fail+1)); fi
}
# Llama, untied, 4 heads, 2 KV heads
run lbase llama 1 4 1 --zero 0
run l_tp2 llama 2 4 1 --tp 2 --zero 0 && check l_tp2 lbase
run l_tp4 llama 4 4 1 --tp 4 --zero 1 && check l_tp4 lbase              # KV heads 2 < T 4
run l_tp2dp2z3 llama 4 2 1 --tp 2 --zero 3 && check l_tp2dp2z3 lbase
run l_tp2dp2z1ga llama 4 1 2 --tp 2 --zero 1 && check l_tp2dp2z1ga lbase
# the optimizer on the host: the same bits as on the backend (each TP rank updates its own slices)
run l_tp2dp2off llama 4 2 1 --tp 2 --zero 3 --offload-optimizer cpu &&
  { $CMP "$W/l_tp2dp2off" "$W/l_tp2dp2z3" --exact && pass=$((pass+1)) || fail=$((fail+1)); }
run l_tp2ac llama 2 2 2 --tp 2 --zero 3 --activation-checkpoint full && check l_tp2ac lbase
# from HF weights: each rank reads its slices (rows of q/k/v, gate/up; columns of o/down) from the file
run ld1 lbase/model 1 4 1 --zero 0
run ld_tp4 lbase/model 4 4 1 --tp 4 --zero 2 && check ld_tp4 ld1
# Mistral, tied embeddings, sliding window 6, one KV head (replicated over every TP rank);
# a held-out loss every 5 steps (the TP ranks of a group evaluate the same windows)
EV="--split 90,10,0 --eval-every 5 --eval-samples 8"
run mbase mistral 1 4 1 --zero 0 $EV
run m_tp4 mistral 4 4 1 --tp 4 --zero 3 $EV && check m_tp4 mbase
run m_tp2dp2z0 mistral 4 2 1 --tp 2 --zero 0 $EV && check m_tp2dp2z0 mbase

# Sequence parallelism: the stream and the norms on (b*s)/T rows per rank, reduce-scatter after
# o_proj / down_proj, all-gather before qkv / gate|up / the head; the norms' gradients summed over TP
SP=--sequence-parallel
run s_tp2 llama 2 4 1 --tp 2 --zero 0 $SP && check s_tp2 lbase
run s_tp4 llama 4 4 1 --tp 4 --zero 3 $SP && check s_tp4 lbase               # KV heads 2 < T 4
run s_tp2dp2z3 llama 4 2 1 --tp 2 --zero 3 $SP && check s_tp2dp2z3 lbase
run s_tp2dp2z0ga llama 4 1 2 --tp 2 --zero 0 $SP && check s_tp2dp2z0ga lbase
run s_tp2ac llama 2 2 2 --tp 2 --zero 1 --activation-checkpoint full $SP && check s_tp2ac lbase
run s_tp2sel llama 2 4 1 --tp 2 --zero 0 --activation-checkpoint selective $SP && check s_tp2sel lbase
run sm_tp4 mistral 4 4 1 --tp 4 --zero 3 $EV $SP && check sm_tp4 mbase       # window 6, one KV head
run sm_tp2dp2z0 mistral 4 2 1 --tp 2 --zero 0 $EV $SP && check sm_tp2dp2z0 mbase

# Odd vocabulary (211, padded to 212 at T = 2 and 4; the padding never changes the loss), untied
# and tied (the tied weight is the embedding's vocabulary slice, read by the head), with and
# without sequence parallelism
for v in v211u v211t; do
  run ${v}base $v 1 4 1 --zero 0 --data "$W/data211"
  run ${v}_tp2 $v 2 4 1 --tp 2 --zero 0 --data "$W/data211" && check ${v}_tp2 ${v}base
  run ${v}_tp4 $v 4 4 1 --tp 4 --zero 3 --data "$W/data211" && check ${v}_tp4 ${v}base
  run ${v}_tp2dp2sp $v 4 2 1 --tp 2 --zero 3 --data "$W/data211" $SP && check ${v}_tp2dp2sp ${v}base
  run ${v}_tp4sp $v 4 4 1 --tp 4 --zero 1 --data "$W/data211" $SP && check ${v}_tp4sp ${v}base
done

# The TP axis's bytes per step (metrics "tp_bytes", absent at T = 1) against closed forms from
# config.json, exactly. Convention (shard/comm.c): an all-reduce of n elements is counted under
# "allreduce" as 2*(T-1)*ceil(n/T), i.e. a reduce-scatter + an all-gather of n; an all-gather or a
# reduce-scatter whose per-rank block is k elements as (T-1)*k. Per layer per micro-batch
# (N = b*s tokens) the blocks move 8*N*h*(T-1)/T elements either way: without sequence
# parallelism 4 all-reduces of the (N, h) stream (2 forward after o_proj / down_proj, 2 backward
# before the norms), with it 4 all-gathers + 4 reduce-scatters of (N/T, h) blocks (forward: AG
# before qkv and gate|up, RS after o_proj and down_proj; backward the reverse). Plus, when
# nkv < T, the all-reduce of every KV group's gradient slot (2*hd*h per group); under sequence
# parallelism the all-reduce of the two norms' gradients (h each). Embedding and head
# (models/vocab_parallel.h): without SP the embedding all-reduces (N, h), the head all-gathers
# the N row maxima (the max all-reduce, shard/tp.c), all-reduces (N, 2) sum-exp | target logit
# and, in backward, (N, h); with SP the embedding reduce-scatters (N, h) and all-gathers it back
# in backward, the head all-gathers (N, h), the N maxima, all-reduces (N, 2), reduce-scatters
# (N, h) and all-reduces the final norm's gradient (h). The gradient norm all-gathers one double.
# And the activation arena's peak against the engine's op-by-op form (fp32, no dropout,
# attention keeps its log-sum-exp, not the s x s scores), printed beside Korthikanti et al.'s
# per-layer bytes (field guide): per layer the block input and xmid (N/T rows under SP), ln1 and
# ln2 (N rows: the all-gathered inputs of the column-parallel GEMMs, kept for their weight
# gradients), 2 norm statistics per row of the stream, and split by T the q|k|v rows, the
# attention output, the lse (heads / T), gate|up and silu(gate)*up; plus the head's input
# (N/T rows under SP), its normalised copy (N, h) and 3 N vectors.
closed() { # run model T micro accum sp
  "$PY" - "$W/$1/metrics.jsonl" "$W/$2/config.json" "$3" "$4" "$5" "$6" "$W/lbase/metrics.jsonl" <<'P'
import json, math, sys
m, c, T, b, ga, sp, base = sys.argv[1], json.load(open(sys.argv[2])), *map(int, sys.argv[3:7]), sys.argv[7]
h, L, nh, nkv, s = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], 16
hd, E, N = h // nh, 4, b * s
ar = lambda n: 2 * (T - 1) * math.ceil(n / T) * E   # all-reduce = reduce-scatter + all-gather of n
blk = lambda n: (T - 1) * (n // T) * E               # one all-gather / reduce-scatter of n, blocks n/T
assert (N * h) % T == 0
layer = 8 * N * h * (T - 1) // T * E                  # the issue's closed form, per layer per micro-batch
kv = ar(nkv * 2 * hd * h) if nkv < T else 0
if sp:
    assert 4 * blk(N * h) * 2 == layer
    want = {"allgather": ga * (L * 4 * blk(N * h) + 2 * blk(N * h) + (T - 1) * N * E) + 8 * (T - 1),
            "reduce_scatter": ga * (L * 4 * blk(N * h) + 2 * blk(N * h)),
            "allreduce": ga * (L * (2 * ar(h) + kv) + ar(2 * N) + ar(h))}
else:
    assert 4 * ar(N * h) == layer
    want = {"allgather": ga * (T - 1) * N * E + 8 * (T - 1), "reduce_scatter": 0,
            "allreduce": ga * (L * (4 * ar(N * h) + kv) + 2 * ar(N * h) + ar(2 * N))}
got = [json.loads(l)["tp_bytes"] for l in open(m)]
ok = all(g == want for g in got) and not any("tp_bytes" in json.loads(l) for l in open(base))
n, I = N // T if sp else N, c["intermediate_size"] // T
nh_l, nkv_l = nh // T, (nkv // T if nkv >= T else 1)
split = N * ((nh_l + 2 * nkv_l) * hd + nh_l * hd + nh_l + 3 * I)
lay = 2 * n * h + 2 * N * h + 2 * n + split
acts = E * (L * lay + n * h + N * h + 3 * N)
got_acts = json.loads(open(m).readlines()[-1])["arena_peak"]["acts"]
ok &= got_acts == acts
sbh = s * b * h
kor = {"TP": sbh * (10 + 24 / T + 5 * nh * s / (h * T)), "TP+SP": sbh * (34 + 5 * nh * s / h) / T,
       "TP+SP+selective": 34 * sbh / T}
print(f"{'OK  ' if ok else 'FAIL'} {sys.argv[1]}: tp_bytes per step {got[0]}, closed form {want} "
      f"(blocks {L} x {layer} B = 8*b*s*h*(T-1)/T x 4 B per layer per micro-batch); activation peak {got_acts} B, "
      f"closed form {acts} B")
print(f"     per layer: engine {E * lay} B (fp32){' with SP' if sp else ''}; Korthikanti (2-byte) "
      + ", ".join(f"{k} {v:.0f} B" for k, v in kor.items()))
sys.exit(0 if ok else 1)
P
}
for r in "l_tp2 llama 2 4 1 0" "l_tp4 llama 4 4 1 0" "l_tp2dp2z1ga llama 2 1 2 0" "s_tp2 llama 2 4 1 1" \
         "s_tp4 llama 4 4 1 1" "s_tp2dp2z0ga llama 2 1 2 1" "v211t_tp4sp v211t 4 4 1 1" "v211u_tp2 v211u 2 4 1 0"; do
  if closed $r; then pass=$((pass+1)); else fail=$((fail+1)); fi
done

# Checkpoints hold whole tensors: saved at TP 2 x DP 2 (ZeRO-3), resumed from step 5 at TP 1 x DP 4
# and TP 4 x DP 1; the continued losses and the final weights match the uninterrupted run to 1e-5,
# and `convert --to-hf` of its step-10 checkpoint is its --save, bit for bit.
cont() { # uninterrupted resumed: losses of the resumed steps and the final weights
  "$PY" - "$W/$1" "$W/$2" <<'P'
import json, os, sys
sys.path.insert(0, os.environ["SL_SRC"] + "/tests/lib")
from compare import read_safetensors
import numpy as np
a, b = sys.argv[1], sys.argv[2]
la = {j["step"]: j["loss"] for j in map(json.loads, open(a + "/metrics.jsonl"))}
lb = {j["step"]: j["loss"] for j in map(json.loads, open(b + "/metrics.jsonl"))}
dl = max(abs(la[s] - lb[s]) / la[s] for s in lb) if sorted(lb) == list(range(6, 11)) else float("inf")
pa, pb = read_safetensors(a + "/model/model.safetensors"), read_safetensors(b + "/model/model.safetensors")
dp = max(np.max(np.abs(pa[k].astype(np.float64) - pb[k])) / np.max(np.abs(pa[k])) for k in pa)
ok = dl <= 1e-5 and dp <= 1e-5 and sorted(pa) == sorted(pb)
print(f"{'OK  ' if ok else 'FAIL'} {b} resumed at step 5: steps {sorted(lb)}, worst loss diff {dl:.3g}, worst param diff {dp:.3g}")
sys.exit(0 if ok else 1)
P
}
run ck_full llama 4 2 1 --tp 2 --zero 3 --ckpt-dir "$W/ck" --ckpt-every 5 --keep-last 0 && check ck_full lbase
"$B" convert --from-ckpt "$W/ck" --model-config "$W/llama" --to-hf "$W/ck_hf" > /dev/null 2>&1 &&
  cmp -s "$W/ck_hf/model.safetensors" "$W/ck_full/model/model.safetensors" && pass=$((pass+1)) ||
  bad "convert --to-hf of the TP checkpoint differs from the run's --save"
rm -rf "$W/ck/step-000010" "$W/ck/latest"
for lay in "tp1dp4 4 1 1 --zero 1" "tp4dp1 4 4 4 --zero 0"; do
  set -- $lay; name=ck_$1; np=$2; mb=$3; tp=$4; shift 4
  rm -rf "$W/ck_$name"; cp -r "$W/ck" "$W/ck_$name"
  if run $name llama $np $mb 1 --tp $tp "$@" --ckpt-dir "$W/ck_$name" --resume &&
     grep -q "resumed from .* at step 5" "$W/$name.log" && cont ck_full $name; then
    pass=$((pass+1))
  else
    bad "resume $name"
  fi
done

# The same with a padded vocabulary slice (211 over TP 2: 106 + 105 real rows; over TP 4: 53 x 3 + 52):
# checkpoints hold the unpadded (211, h) tensors; saved at TP 2 x DP 2 with sequence parallelism,
# resumed at TP 4 x DP 1 and at TP 1 x DP 4 (no SP), against the uninterrupted run
run ckv_full v211u 4 2 1 --tp 2 --zero 3 --data "$W/data211" $SP --ckpt-dir "$W/ckv" --ckpt-every 5 --keep-last 0 &&
  check ckv_full v211ubase
"$B" convert --from-ckpt "$W/ckv" --model-config "$W/v211u" --to-hf "$W/ckv_hf" > /dev/null 2>&1 &&
  cmp -s "$W/ckv_hf/model.safetensors" "$W/ckv_full/model/model.safetensors" && pass=$((pass+1)) ||
  bad "convert --to-hf of the padded-vocabulary TP checkpoint differs from the run's --save"
rm -rf "$W/ckv/step-000010" "$W/ckv/latest"
for lay in "vtp4dp1 4 4 4 --zero 1 $SP" "vtp1dp4 4 1 1 --zero 0"; do
  set -- $lay; name=ck_$1; np=$2; mb=$3; tp=$4; shift 4
  rm -rf "$W/ck_$name"; cp -r "$W/ckv" "$W/ck_$name"
  if run $name v211u $np $mb 1 --tp $tp "$@" --data "$W/data211" --ckpt-dir "$W/ck_$name" --resume &&
     grep -q "resumed from .* at step 5" "$W/$name.log" && cont ckv_full $name; then
    pass=$((pass+1))
  else
    bad "resume $name"
  fi
done

# the mesh report names the layout and warns when a TP group spans nodes (SL_MESH_HOSTS fakes two nodes)
SL_MESH_HOSTS=a,a,b,b $MPI -x SL_MESH_HOSTS -np 4 "$B" train $COMMON --model "$W/llama" --micro-batch 4 --steps 1 \
  --tp 4 --out-dir "$W/mesh" > "$W/mesh.log" 2>&1
if grep -q "mesh: 4 ranks on 2 nodes; tensor parallel 4 x data parallel 1" "$W/mesh.log" &&
   grep -q "tensor-parallel group 0 (ranks 0-3) spans nodes" "$W/mesh.log"; then
  pass=$((pass+1))
else
  bad "mesh report at --tp 4 over two nodes"; grep mesh "$W/mesh.log"
fi

refuse() { # name np needle [flags...]
  local name=$1 np=$2 needle=$3; shift 3
  $MPI -np "$np" "$B" train $COMMON --micro-batch 1 --out-dir "$W/$name" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/$name.log"; then
    ok "refusal $name: $(grep -F -- "$needle" "$W/$name.log" | head -1 | sed 's/^\[rank [0-9]*\] //')"
  else
    bad "refusal $name (exit $rc, wanted 2 and '$needle')"; tail -3 "$W/$name.log"
  fi
}
refuse heads 3 "num_attention_heads 4 is not divisible by --tp 3; valid --tp values for this model: 1, 2, 4" \
  --model "$W/llama" --tp 3
refuse more 4 "--tp 4 is more than num_attention_heads 2; valid --tp values for this model: 1, 2" \
  --model "$W/nh2" --tp 4
refuse world 3 "--tp 2 does not divide the number of ranks 3 (valid --tp values: 1, 3)" --model "$W/llama" --tp 2
refuse range 1 "--tp must be in [1, 4096]" --model "$W/llama" --tp 0
refuse mamba 3 "intermediate_size (d_inner = expand x hidden_size) 64 is not divisible by --tp 3" --model "$W/mamba" --tp 3
refuse sprows 2 "--sequence-parallel splits the micro-batch's tokens over the TP ranks: --micro-batch 1 x --seq-len 15 = 15 tokens is not divisible by --tp 2" \
  --model "$W/llama" --tp 2 --seq-len 15 --sequence-parallel
finish
