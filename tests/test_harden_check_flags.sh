#!/bin/bash
# tests/test_harden_check_flags.sh — issue 11 case 10: every numeric flag has
# a valid range, enforced with exit 2 and a message naming the flag and the
# range; NaN/inf refused; --resume without --ckpt-dir refused; --nproc N
# under an mpirun of another size refused; duplicate keys in a --config
# file refused. In-range edge values must still train (exit 0).
set -u
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
B=${SL_BUILD:-$SL_SRC/build}/shardlm
[ -x "$B" ] || { echo "skip: $B is not built"; exit 77; }
W=$(mktemp -d "${TMPDIR:-/tmp}/sl_flags.XXXXXX")
trap 'rm -rf "$W"' EXIT
. "$SL_SRC/tests/lib/harden_check.sh"
tiny_config "$W/model" '"rope_theta": 10000.0'
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data" > /dev/null || exit 1
COMMON="--model $W/model --data $W/data --steps 1 --micro-batch 1 --seq-len 8 --threads 1 --summary false --plot false --out-dir $W/out"
check() { expect "${*: -2}" "$@"; } # WANT NEEDLE CMD...: named by its last two words
bad() { check 2 "--$1" "$B" train $COMMON "--$1" "$2"; }
bad lr -1; bad lr 0; bad lr nan; bad lr inf; bad min-lr -1e-3
bad beta1 1.5; bad beta1 1; bad beta2 -0.1; bad beta2 nan
bad eps -1; bad eps 0; bad clip nan; bad clip -1; bad weight-decay -0.1
bad warmup -3; bad threads -2; bad prefetch -1; bad keep-last -1
bad comm-timeout 0; bad comm-timeout nan; bad steps -1; bad micro-batch 0; bad seq-len 0
bad grad-accum 0; bad zero 4; bad seed -5; bad peak-tflops -inf; bad prefetch-mb -1
bad offload-budget-mb 0; bad ckpt-every -1; bad max-restarts -1; bad log-every -1; bad nproc -1
check 2 "in [0, 1)" "$B" train $COMMON --beta1=2
# the usage text states the ranges
check 0 "range [0, 1)" "$B" train --help
# in-range edges train
check 0 "" "$B" train $COMMON --beta1 0 --beta2 0.5 --clip 0 --warmup 0 --prefetch 0 --keep-last 0 --eps 1e-30
# --resume without --ckpt-dir
check 2 "--ckpt-dir" "$B" train $COMMON --resume
# --config: duplicate keys; a range violation in the file names the file
printf '{"lr": 1e-3, "steps": 1, "lr": 2e-3}\n' > "$W/dup.json"
check 2 "dup.json" "$B" train $COMMON --config "$W/dup.json"
printf '{"beta2": 1.0}\n' > "$W/b2.json"
check 2 "--beta2" "$B" train $COMMON --config "$W/b2.json"
# --nproc under an mpirun of another size
if command -v mpirun > /dev/null; then
  check 2 "--nproc 3" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$B" train $COMMON --nproc 3
  check 0 "" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$B" train $COMMON --nproc 2
fi
finish
