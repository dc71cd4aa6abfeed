#!/usr/bin/env bash
# tests/test_mpi_tp.sh — the tensor-parallel hooks (shard/tp.c) under
# mpirun: TP 2 of 2 ranks, TP 2 x DP 2 and TP 4 of 4 ranks, and the T = 1
# group alone (tests/test_mpi_tp.c checks values and counted bytes).
set -u
BIN="${SL_BUILD:-}/tests/test_mpi_tp"
[ -n "${SL_BUILD:-}" ] && [ -x "$BIN" ] || { echo "skip: $BIN not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
pass=0; fail=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
for case in "1 1" "2 2" "4 2" "4 4"; do
  set -- $case
  if timeout 60 $MPI -np "$1" "$BIN" "$2" > "$log" 2>&1 && grep -q "passed, 0 failed" "$log"; then
    echo "ok   world $1, TP $2: $(grep passed "$log")"; pass=$((pass+1))
  else
    echo "FAIL world $1, TP $2"; tail -20 "$log"; fail=$((fail+1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
