#!/bin/bash
# tests/cli/reliability/test_harden_save.sh — issue 11 case 2: `train --save DIR` and
# `convert --to-hf DIR` replace DIR atomically. On a full disk (a small
# tmpfs when root, else a file-size limit) the save fails with a message,
# exit 1, and the old directory is bit-identical with no temporary left
# beside it; a good save replaces the weights and config, keeps the other
# files (tokenizer.json), and leaves nothing behind. A --save path that is a
# file is refused (exit 2). A temporary left by a killed save goes at the next.
source "${SL_SRC:?}/tests/lib/harden.sh"
sums() { (cd "$1" && md5sum $(ls | sort)); }
# limited CMD...: runs CMD where writing the model cannot fit. Without root
# (no tmpfs) a file-size limit stands in; MPI cannot start under one, so the
# train case then runs convert only.
if small_fs $W/fs 200; then
  DEST=$W/fs; limited() { "$@"; }; how="a 200 KiB tmpfs"; TRAIN_FULL=1
else
  DEST=$W/lim; mkdir -p $DEST; limited() { (trap '' XFSZ; ulimit -f 100; "$@"); }; how="a 100 KiB file-size limit"
  TRAIN_FULL=0
fi
echo "(full disk: $how)"

$TRAIN --steps 2 --out-dir $W/o --save $DEST/m > $W/1.log 2>&1
rc_is "first save" $? 0 $W/1.log
echo '{"tokenizer": "kept"}' > $DEST/m/tokenizer.json
before=$(sums $DEST/m)
# the replacing saves use another config.json (rope_theta), so a half-done
# save that replaced the config first would show
tiny_model "$W/model2" llama "$HARDEN_CFG"', "rope_theta": 20000.0'
grep -q '"rope_theta": 20000.0' "$W/model2/config.json" || bad "model2 does not differ from model"

# 1. a second save (different weights) that does not fit: the old directory stays
if [ $TRAIN_FULL = 1 ]; then
  $TRAIN --steps 4 --model $W/model2 --out-dir $W/o --save $DEST/m > $W/2.log 2>&1
  rc_is "train --save on a full disk fails" $? 1 $W/2.log "was not written (an existing directory there is untouched)"
  check "the old directory is bit-identical" test "$(sums $DEST/m)" = "$before"
  check "no temporary directory left beside it" test "$(ls -A $DEST)" = m
else echo "(not root: the train --save full-disk case is skipped)"; fi

# 2. convert --to-hf takes the same path
# (the checkpoint is of model2: convert refuses a config of another model)
$TRAIN --steps 3 --model $W/model2 --out-dir $W/o --ckpt-dir $W/ck > $W/3.log 2>&1 || bad "training a checkpoint"
limited $CLI convert --from-ckpt $W/ck --model-config $W/model2 --to-hf $DEST/m > $W/4.log 2>&1
rc_is "convert --to-hf on a full disk fails" $? 1 $W/4.log "was not written"
check "convert: the old directory is bit-identical" test "$(sums $DEST/m)" = "$before"
check "convert: no temporary directory left" test "$(ls -A $DEST)" = m

# 3. a save that fits replaces weights and config, keeps other files, leaves nothing
mkdir -p $W/ok; $TRAIN --steps 2 --out-dir $W/o --save $W/ok/m > /dev/null 2>&1 && echo '{"tokenizer": "kept"}' > $W/ok/m/tokenizer.json
old=$(md5sum < $W/ok/m/model.safetensors)
echo '{"stale": 1}' > $W/ok/m/config.json
mkdir $W/ok/.m.tmp-999999999-0 && touch $W/ok/.m.tmp-999999999-0/model.safetensors # a save killed mid-way
$TRAIN --steps 4 --out-dir $W/o --save $W/ok/m > $W/5.log 2>&1
rc_is "a save that fits" $? 0 $W/5.log
check "new weights in place" test "$(md5sum < $W/ok/m/model.safetensors)" != "$old"
check "config.json rewritten" grep -q LlamaForCausalLM $W/ok/m/config.json
check "tokenizer.json kept" grep -q kept $W/ok/m/tokenizer.json
check "nothing left beside it (a dead save's temporary removed)" test "$(ls -A $W/ok)" = m
$CLI convert --from-ckpt $W/ck --model-config $W/model2 --to-hf $W/ok/m > $W/6.log 2>&1
rc_is "convert --to-hf over an existing directory" $? 0 $W/6.log
check "convert: tokenizer.json kept, nothing left beside it" test "$(ls -A $W/ok)" = m -a -f $W/ok/m/tokenizer.json

# 4. a --save path that is a file
touch $W/afile
$TRAIN --steps 1 --out-dir $W/o --save $W/afile > $W/7.log 2>&1
rc_is "--save onto a file refused" $? 2 $W/7.log "is not a directory"
finish
