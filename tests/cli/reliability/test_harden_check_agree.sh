#!/bin/bash
# tests/cli/reliability/test_harden_check_agree.sh — issue 11 case 7: ranks agree at start-up.
# Two ranks run with the same command line, but a wrapper cds each rank into
# its own directory, so the same relative --model path names a different
# config.json (rope_theta, tie_word_embeddings, head_dim), a different set of
# weight files (present on rank 0 only), or the ranks get different flags
# (MPMD). Every case must stop every rank with exit 2 and a message naming
# the field; identical inputs must train (exit 0).
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_agree mpi
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
cfg() { # DIR rope_theta tie head_dim
  tiny_config "$1" "\"head_dim\": $4, \"rope_theta\": $2, \"tie_word_embeddings\": $3"
}
tiny_data "$W/data"
cat > "$W/wrap.sh" <<S
#!/bin/bash
cd "$W/case/r\$OMPI_COMM_WORLD_RANK" && exec "\$@"
S
chmod +x "$W/wrap.sh"
COMMON="--init random --data $W/data --steps 2 --micro-batch 2 --seq-len 16 --threads 1 --summary false --plot false"
# expect NAME RC NEEDLE [extra args...]: runs the two ranks in $W/case/r0, r1
expect() {
  local name=$1 want=$2 needle=$3; shift 3
  timeout 120 $MPI -np 2 "$W/wrap.sh" "$B" train --model model $COMMON "$@" > "$W/$name.log" 2>&1
  local rc=$? why=""
  if [ $rc -ne "$want" ]; then why="exit $rc, expected $want"
  elif [ -n "$needle" ] && ! grep -qF -- "$needle" "$W/$name.log"; then why="message does not name '$needle'"; fi
  if [ -z "$why" ]; then ok "$name"; grep -m1 "disagree" "$W/$name.log" | sed 's/^/     /'
  else no "$name: $why" "$W/$name.log"; fi
}
setup() { rm -rf "$W/case"; mkdir -p "$W/case/r0" "$W/case/r1"; }

setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 false 8
expect same 0 ""
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 500000.0 false 8
expect rope_theta 2 "model.rope_theta"
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 true 8
expect tie_word_embeddings 2 "model.tie_word_embeddings"
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 false 16
expect head_dim 2 "model.head_dim"
# weight files on rank 0 only: write them with a one-rank run, copy to r0
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 false 8
(cd "$W/case/r0" && timeout 60 "$B" train --model model $COMMON --steps 1 --save "$W/saved" > "$W/save.log" 2>&1) ||
  no "could not write weights" "$W/save.log"
cp "$W"/saved/*.safetensors "$W/case/r0/model/" 2>/dev/null
expect weights_rank0_only 2 "weights."
cp "$W"/saved/*.safetensors "$W/case/r1/model/" 2>/dev/null
expect weights_both 0 "" --init hf
# a different tokenizer file per rank
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 false 8
echo '{"model": {}}' > "$W/case/r0/model/tokenizer.json"; echo '{"model": {"x": 1}}' > "$W/case/r1/model/tokenizer.json"
expect tokenizer 2 "weights.tokenizer.json"
# the same relative --data path, a different dataset per rank
rm -f "$W"/case/r*/model/tokenizer.json
tiny_data "$W/case/r0/data"
tiny_data "$W/case/r1/data" 3000
timeout 120 $MPI -np 2 "$W/wrap.sh" "$B" train --model model --init random --data data --steps 1 --micro-batch 2 --seq-len 16 \
  --threads 1 --summary false --plot false > "$W/data.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qF "disagree on data." "$W/data.log"; then ok "dataset per rank"; else no "dataset per rank: exit $rc" "$W/data.log"; fi
# same files, different flags per rank (MPMD)
setup; cfg "$W/case/r0/model" 10000.0 false 8; cfg "$W/case/r1/model" 10000.0 false 8
timeout 120 $MPI -np 1 "$W/wrap.sh" "$B" train --model model $COMMON --lr 1e-3 : \
  -np 1 "$W/wrap.sh" "$B" train --model model $COMMON --lr 2e-3 > "$W/mpmd.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qF "train.lr" "$W/mpmd.log"; then ok "mpmd_lr"; else no "mpmd_lr: exit $rc" "$W/mpmd.log"; fi
finish
