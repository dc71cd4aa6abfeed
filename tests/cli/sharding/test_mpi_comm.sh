#!/usr/bin/env bash
# tests/cli/sharding/test_mpi_comm.sh — runs $SL_BUILD/tests/test_mpi_comm
# (test_mpi_comm.c beside it) alone (the self backend, no MPI library) and
# alone with SL_COMM=mpi, under mpirun for 1..4 ranks, then the two fault
# modes (a rank that stops issuing collectives, a rank that SIGKILLs itself)
# with a short watchdog timeout: every run must end non-zero within a
# wall-clock bound, naming rank 1.
# Env: SL_BUILD (build dir; the program is $SL_BUILD/tests/test_mpi_comm).
source "${SL_SRC:?}/tests/lib/run.sh" mpi_comm mpi
BIN="$SL_BUILD/tests/test_mpi_comm"
[ -x "$BIN" ] || skip "$BIN not built"
export OMP_NUM_THREADS=1
log=$W/log

for how in self mpi; do
  if env -u OMPI_COMM_WORLD_SIZE SL_COMM=$how timeout 60 "$BIN" >"$log" 2>&1 && grep -q "passed, 0 failed" "$log"; then
    ok "alone, SL_COMM=$how: $(grep 'passed' "$log")"
  else
    bad "alone, SL_COMM=$how"; tail -30 "$log"
  fi
done
for n in 1 2 3 4; do
  if timeout 120 $MPI -np "$n" "$BIN" >"$log" 2>&1 && grep -q "passed, 0 failed" "$log"; then
    ok "np=$n: $(grep 'passed' "$log")"
  else
    bad "np=$n"; tail -30 "$log"
  fi
done

# fault runs: timeout T = 2 s; the job must be down within T + 15 s
T=2
BOUND=$((T + 15))
fault() { # name, expected-regex, extra mpirun args...
  local name=$1 re=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s)
  timeout $((BOUND + 30)) $MPI -np 3 "$@" "$BIN" "$name" "$T" >"$log" 2>&1
  rc=$?
  t1=$(date +%s)
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $((t1 - t0)) -le "$BOUND" ] && grep -Eq "$re" "$log"; then
    ok "$name $*: exit $rc after $((t1 - t0)) s"
  else
    bad "$name $*: exit $rc after $((t1 - t0)) s (bound $BOUND s), expected /$re/"; tail -30 "$log"
  fi
}
WD='collective allreduce #4 on comm world \(3 ranks\) did not complete within 2\.0 s; ranks that never arrived: 1'
fault hang "$WD"
# mpirun itself takes the job down when a rank dies; accept its message or ours
fault kill "process rank 1 .*(exited on signal 9|Killed)|$WD"
# with mpirun told not to abort on a dead rank, the watchdog must do it
fault kill "$WD" --mca orte_abort_on_non_zero_status 0
# a recv whose send is never posted: the watchdog names it
fault p2p 'recv #1 \(16 x f32, tag 9\) from rank 2 \(world rank 2\) on comm world did not complete within 2\.0 s'

finish
