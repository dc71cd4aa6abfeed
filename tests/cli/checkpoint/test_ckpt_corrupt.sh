#!/usr/bin/env bash
# Corruption (issue 5, test 5): with step-4 and step-8 checkpoints, damage
# step 8 (flipped bit in a shard, truncated shard, missing shard, manifest
# that disagrees with a file, flipped bit in the manifest): the resume refuses
# it with a message naming the file and falls back to step 4 with a warning.
# Both damaged: the run fails, naming the file.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_corrupt mpi
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
RUN="$MPI -np 2 $B train --model $W/model --init random --seq-len 16
 --micro-batch 2 --data-order sequential --threads 1 --peak-tflops 1 --steps 8 --zero 1 --out-dir $W/o --metrics $W/m.jsonl"
$RUN --ckpt-dir $W/base --ckpt-every 4 --keep-last 0 > $W/base.log 2>&1 || { cat $W/base.log; exit 1; }
S8=step-000008
flip() { "$PY" -c "
import sys; p, off = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, 'rb').read())
off = off if off >= 0 else len(b) // 2; b[off] ^= 0x10; open(p, 'wb').write(b)" "$@"; }
check() { # name expected-file-in-message
  $RUN --ckpt-dir $W/c --resume > $W/r.log 2>&1 || { bad "$1: resume failed"; cat $W/r.log; return; }
  if grep -q "refused:.*$2" $W/r.log && grep -q "resumed from the older checkpoint .*step-000004" $W/r.log &&
     grep -q "resumed from .* at step 4" $W/r.log; then
    ok "$1: refused ($(grep -m1 -o "refused:.*" $W/r.log | cut -c1-170)); fell back to step 4"
  else bad "$1: not handled"; cat $W/r.log; fi
}
new() { rm -rf $W/c; cp -r $W/base $W/c; }
new; flip $W/c/$S8/rank-00001.bin -1; check "bit flip in a shard" "rank-00001.bin: checksum mismatch"
new; truncate -s -100 $W/c/$S8/rank-00000.bin; check "truncated shard" "rank-00000.bin: .* bytes, but the manifest records"
new; rm $W/c/$S8/rank-00001.bin; check "missing shard" "rank-00001.bin: cannot open"
new; flip $W/c/$S8/manifest.json 300; check "bit flip in the manifest" "manifest.json: checksum mismatch"
# a manifest that is valid and checksummed but disagrees with a file
new; "$PY" - $W/c/$S8 <<'PY'
import json, sys
d = sys.argv[1]; m = json.load(open(d + "/manifest.json")); m["files"][1]["bytes"] += 8
open(d + "/manifest.json", "w").write(json.dumps(m, indent=1))
PY
# re-seal it with the checksum shardlm computes (the --xxh64 helper mode of
# tests/unit/formats/test_ckpt_io.c)
$SL_BUILD/tests/test_ckpt_io --xxh64 $W/c/$S8/manifest.json > $W/c/$S8/manifest.json.xxh64 || { echo "no test_ckpt_io helper"; exit 1; }
check "manifest disagrees with a file" "rank-00001.bin: .* bytes, but the manifest records"
# both damaged: refused, no fallback left
new; flip $W/c/$S8/rank-00000.bin -1; flip $W/c/step-000004/rank-00001.bin -1
if $RUN --ckpt-dir $W/c --resume > $W/r.log 2>&1; then bad "all damaged: the run did not fail"
elif grep -q "no valid checkpoint among 2 (the newest was refused: .*rank-00000.bin: checksum mismatch" $W/r.log; then
  ok "all damaged: refused ($(grep -m1 -o 'no valid checkpoint.*' $W/r.log | cut -c1-160))"
else bad "all damaged: wrong message"; cat $W/r.log; fi
finish
