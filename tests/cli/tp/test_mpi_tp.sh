#!/usr/bin/env bash
# tests/cli/tp/test_mpi_tp.sh — the tensor-parallel hooks (shard/tp.c) under
# mpirun: TP 2 of 2 ranks, TP 2 x DP 2 and TP 4 of 4 ranks, and the T = 1
# group alone (tests/cli/tp/test_mpi_tp.c checks values and counted bytes).
source "${SL_SRC:?}/tests/lib/run.sh" mpi_tp mpi
BIN="$SL_BUILD/tests/test_mpi_tp"
[ -x "$BIN" ] || skip "$BIN not built"
log=$W/log
for case in "1 1" "2 2" "4 2" "4 4"; do
  set -- $case
  if timeout 60 $MPI -np "$1" "$BIN" "$2" > "$log" 2>&1 && grep -q "passed, 0 failed" "$log"; then
    ok "world $1, TP $2: $(grep passed "$log")"
  else
    bad "world $1, TP $2"; tail -20 "$log"
  fi
done
finish
