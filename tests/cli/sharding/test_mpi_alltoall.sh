#!/usr/bin/env bash
# tests/cli/sharding/test_mpi_alltoall.sh — sl_comm_alltoallv and the EP
# hooks (shard/ep.h): $SL_BUILD/tests/test_mpi_alltoall (the .c beside it)
# alone (self backend) and under mpirun at 3 and 4 ranks, each run also
# covering a counting comm; the emulated NCCL (test_emu_alltoall: the same
# program on the CUDA emulator, tests/cuda_emu) at 2, 3 and 4 ranks, the
# real NCCL at one rank where there is a GPU; and a
# rank that never issues its all-to-all, which the watchdog (2 s) must name.
# Exact comparisons: every element encodes (source, destination, index).
# About 15 s on 2 cores.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_alltoall mpi
BIN="$SL_BUILD/tests/test_mpi_alltoall"
EMU="$SL_BUILD/tests/test_emu_alltoall"
[ -x "$BIN" ] || skip "$BIN not built"
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
log=$W/log
runs() { # label, command...
  local what=$1; shift
  if timeout 120 "$@" >"$log" 2>&1 && grep -q "passed, 0 failed" "$log"; then
    ok "$what: $(grep 'passed' "$log")"
  else
    bad "$what"; tail -20 "$log"
  fi
}
runs "alone (self)" env -u OMPI_COMM_WORLD_SIZE SL_COMM=self "$BIN"
for n in 3 4; do runs "np=$n" $MPI -np "$n" "$BIN"; done
# a real CUDA device (NCCL at one rank: the block to itself); 77 where there is none
env -u OMPI_COMM_WORLD_SIZE SL_COMM=self timeout 120 "$BIN" device >"$log" 2>&1
case $? in
  77) echo "note: no CUDA device: the real NCCL case at one rank is not run" ;;
  0) ok "real NCCL alone: $(grep 'passed' "$log")" ;;
  *) bad "real NCCL alone"; tail -20 "$log" ;;
esac
if [ -x "$EMU" ]; then
  for n in 2 3 4; do runs "emulated NCCL np=$n" $MPI -np "$n" "$EMU" device; done
else
  echo "note: $EMU not built (no C++ compiler): the emulated NCCL cases are not run"
fi
# the watchdog names the all-to-all and the rank that never arrived
t0=$(date +%s)
timeout 60 $MPI -np 3 "$BIN" hang 2 >"$log" 2>&1
rc=$? t1=$(date +%s)
re='collective alltoall #2 on comm world \(3 ranks\) did not complete within 2\.0 s; ranks that never arrived: 1'
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $((t1 - t0)) -le 20 ] && grep -Eq "$re" "$log"; then
  ok "hang: exit $rc after $((t1 - t0)) s, named"
else
  bad "hang: exit $rc after $((t1 - t0)) s, expected /$re/"; tail -20 "$log"
fi
finish
