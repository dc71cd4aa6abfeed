#!/usr/bin/env bash
# shardlm convert (issue 5, test 7): HF -> ckpt (world 3, ZeRO 1) -> HF is
# byte-identical tensor by tensor (and file by file), also through sharded
# output (--max-shard-size); a training checkpoint's master weights exported
# with --to-hf equal the trainer's own --save at that step; and
# `train --resume` from a converted checkpoint starts from the HF weights:
# its first loss equals a run that loads the same weights with --model.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_convert mpi
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
SL=$B
RUN="$MPI -np 2 $SL train --seq-len 16 --micro-batch 2 --data-order sequential
 --threads 1 --peak-tflops 1 --zero 3 --out-dir $W/o"
$RUN --model $W/model --init random --steps 5 --ckpt-dir $W/trainck --save $W/hf0 --metrics $W/m0.jsonl > $W/t.log 2>&1 || { cat $W/t.log; exit 1; }
same() { "$PY" - "$@" <<'PY'
import json, os, struct, sys
def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            b = open(os.path.join(d, f), "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
            h.pop("__metadata__", None)
            for k, v in h.items():
                out[k] = (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]])
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
ok = len(a) > 0 and a == b
print(f"{sys.argv[3]}: {len(a)} tensors byte-identical: {ok}")
sys.exit(0 if ok else 1)
PY
}
# check CMD...: ok, or bad, with the line CMD prints
check() { local out; if out=$("$@"); then ok "$out"; else bad "${out:-$*}"; fi; }
$SL convert --from-hf $W/hf0 --to-ckpt $W/ck --world-size 3 --zero 1 > /dev/null || exit 1
$SL convert --from-ckpt $W/ck --model-config $W/hf0 --to-hf $W/hf1 > /dev/null || exit 1
check same $W/hf0 $W/hf1 "HF -> ckpt -> HF"
cmp -s $W/hf0/model.safetensors $W/hf1/model.safetensors && ok "model.safetensors files identical" || bad "files differ"
$SL convert --from-ckpt $W/ck/step-000000 --model-config $W/model/config.json --to-hf $W/hf2 --max-shard-size 60000 > /dev/null || exit 1
[ -f $W/hf2/model.safetensors.index.json ] && [ -f $W/hf2/model-00002-of-00003.safetensors ] || { bad "no sharded output"; ls $W/hf2; }
check same $W/hf0 $W/hf2 "HF -> ckpt -> sharded HF"
$SL convert --from-ckpt $W/trainck --model-config $W/model --to-hf $W/hf3 > /dev/null || exit 1
check same $W/hf0 $W/hf3 "training checkpoint (step 5) master vs trainer --save"
# resume from a converted checkpoint == loading the HF weights directly
$SL convert --from-hf $W/hf0 --to-ckpt $W/ck2 --world-size 2 > /dev/null || exit 1
$RUN --model $W/model --steps 3 --ckpt-dir $W/ck2 --resume --metrics $W/m1.jsonl > $W/r.log 2>&1 || { cat $W/r.log; exit 1; }
$RUN --model $W/hf0 --steps 3 --metrics $W/m2.jsonl > $W/r2.log 2>&1 || { cat $W/r2.log; exit 1; }
a=$(head -1 $W/m1.jsonl | sed 's/.*"loss": \([^,]*\),.*/\1/'); b=$(head -1 $W/m2.jsonl | sed 's/.*"loss": \([^,]*\),.*/\1/')
[ "$a" = "$b" ] && ok "resume from converted checkpoint: step-1 loss $a == loss from --model HF dir" || bad "losses differ: $a vs $b"
# hybrid sharding (4 ranks, shard group 2): only replica 0 writes (2 files),
# and the exported master equals the trainer's --save
$MPI -np 4 $SL train --model $W/model --init random --seq-len 16 --micro-batch 1 \
  --data-order sequential --threads 1 --peak-tflops 1 --zero 3 --shard-group 2 --steps 3 --out-dir $W/o \
  --ckpt-dir $W/hyck --save $W/hysave --metrics $W/m3.jsonl > $W/h.log 2>&1 || { cat $W/h.log; exit 1; }
n=$(ls $W/hyck/step-000003/*.bin | wc -l)
[ "$n" = 2 ] && ok "hybrid 4 ranks / shard group 2: $n shard files (replica 0 only)" || bad "hybrid: $n files"
$SL convert --from-ckpt $W/hyck --model-config $W/model --to-hf $W/hf4 > /dev/null || exit 1
check same $W/hysave $W/hf4 "hybrid checkpoint master vs trainer --save"
# bad input is refused by name
$SL convert --from-ckpt $W/nonexistent --model-config $W/model --to-hf $W/x 2> $W/e.log; [ $? = 2 ] && grep -q nonexistent $W/e.log \
  && ok "missing checkpoint refused: $(cut -c1-120 $W/e.log)" || bad "bad input not refused"
finish
