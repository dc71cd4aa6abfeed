#!/bin/bash
# tests/cli/reliability/test_harden_check_flags.sh — issue 11 case 10: every numeric flag has
# a valid range, enforced with exit 2 and a message naming the flag and the
# range; NaN/inf refused; --resume without --ckpt-dir refused; --nproc N
# under an mpirun of another size refused; duplicate keys in a --config
# file refused. In-range edge values must still train (exit 0).
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_flags
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
tiny_config "$W/model" '"rope_theta": 10000.0'
tiny_data "$W/data"
COMMON="--model $W/model --init random --data $W/data --steps 1 --micro-batch 1 --seq-len 8 --threads 1 --summary false --plot false --out-dir $W/out"
check() { expect "${*: -2}" "$@"; } # WANT NEEDLE CMD...: named by its last two words
# badval FLAG VALUE: --FLAG VALUE refused with exit 2 naming the flag
badval() { check 2 "--$1" "$B" train $COMMON "--$1" "$2"; }
badval lr -1; badval lr 0; badval lr nan; badval lr inf; badval min-lr -1e-3
badval beta1 1.5; badval beta1 1; badval beta2 -0.1; badval beta2 nan
badval eps -1; badval eps 0; badval clip nan; badval clip -1; badval weight-decay -0.1
badval warmup -3; badval threads -2; badval prefetch -1; badval keep-last -1
badval comm-timeout 0; badval comm-timeout nan; badval steps -1; badval micro-batch 0; badval seq-len 0
badval grad-accum 0; badval zero 4; badval seed -5; badval peak-tflops -inf; badval prefetch-mb -1
badval offload-budget-mb 0; badval ckpt-every -1; badval max-restarts -1; badval log-every -1; badval nproc -1
check 2 "in [0, 1)" "$B" train $COMMON --beta1=2
# the usage text states the ranges
check 0 "range [0, 1)" "$B" train --help
# in-range edges train
check 0 "" "$B" train $COMMON --beta1 0 --beta2 0.5 --clip 0 --warmup 0 --prefetch 0 --keep-last 0 --eps 1e-30
# plan and pp-schedule parse train's flags through train's table: one range, one message
for f in "tp 0 --tp must be in [1, 4096], found '0'" "pp 2000 --pp must be in [1, 1024], found '2000'" \
  "micro-batch 0 --micro-batch must be in [1, 1e+09], found '0'" "seq-len 1.5 --seq-len expects an integer"; do
  read -r flag val needle <<< "$f"
  expect "plan --$flag $val" 2 "$needle" "$B" plan --model "$W/model" --engine-check --world 1 --"$flag" "$val"
  expect "pp-schedule --$flag $val" 2 "$needle" "$B" pp-schedule --pp 2 --micro-batches 2 --"$flag" "$val"
  expect "train --$flag $val" 2 "$needle" "$B" train $COMMON --"$flag" "$val"
done
expect "plan --zero 4" 2 "--zero must be in [0, 3], found '4'" "$B" plan --model "$W/model" --engine-check --zero 4
# --resume without --ckpt-dir
check 2 "--ckpt-dir" "$B" train $COMMON --resume
# --config: duplicate keys; a range violation in the file names the file
printf '{"lr": 1e-3, "steps": 1, "lr": 2e-3}\n' > "$W/dup.json"
check 2 "dup.json" "$B" train $COMMON --config "$W/dup.json"
printf '{"beta2": 1.0}\n' > "$W/b2.json"
check 2 "--beta2" "$B" train $COMMON --config "$W/b2.json"
# --nproc under an mpirun of another size
if command -v mpirun > /dev/null; then
  check 2 "--nproc 3" $MPI -np 2 "$B" train $COMMON --nproc 3
  check 0 "" $MPI -np 2 "$B" train $COMMON --nproc 2
fi
finish
