#!/usr/bin/env bash
# Faults: a rank killed mid-step (SIGKILL) makes every other rank exit
# non-zero within the timeout with a message naming the dead rank; a rank
# that stops (SIGSTOP) is named by the watchdog; ranks started with
# different settings refuse to start with a message naming the setting.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_fault mpi
on_exit 'pkill -KILL -f "$W" 2>/dev/null'
tiny_model "$W/model" llama '"hidden_size": 64, "intermediate_size": 160, "rope_theta": null'
tiny_data "$W/data"
ARGS="--model $W/model --init random --data $W/data --steps 100000 --micro-batch 2 --seq-len 32 --threads 1 --zero 3 --plot false --summary false --out-dir $W/out"

# the rank's pid: the shardlm process whose environment says rank 1
pid_of_rank() {
  for p in $(pgrep -f "shardlm train --model $W/model"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo $p; return; fi
  done
}
wait_started() { for _ in $(seq 100); do [ -s "$W/out/metrics.jsonl" ] && return 0; sleep 0.2; done; return 1; }

# 1. SIGKILL one rank of 3
rm -rf "$W/out"; $MPI -np 3 "$B" train $ARGS --comm-timeout 10 > "$W/kill.log" 2>&1 &
job=$!
if wait_started; then
  t0=$(date +%s); kill -KILL "$(pid_of_rank 1)"
  timeout 30 tail --pid=$job -f /dev/null; wait $job; rc=$?; t1=$(date +%s)
  # named by mpirun ("process rank 1 ... exited on signal 9") or by the
  # watchdog ("never arrived: 1", "world rank 1 (dead or hung)"), not the
  # start-up banner's "mesh: rank 1 on ..."
  KILLED='process rank 1 with PID [0-9]+ .*signal 9|ranks that never arrived: 1|world rank 1 \((dead or hung|stalled)'
  if [ $rc -ne 0 ] && grep -Eq "$KILLED" "$W/kill.log" && [ $((t1 - t0)) -le 25 ]; then
    ok "SIGKILL of rank 1: job exited $rc after $((t1 - t0)) s naming rank 1: $(grep -Em1 "$KILLED" "$W/kill.log")"
  else bad "SIGKILL of rank 1: exit $rc after $((t1 - t0)) s"; tail -5 "$W/kill.log"; fi
else bad "training did not start"; tail -5 "$W/kill.log"; kill -KILL $job; fi

# 2. SIGSTOP one rank: the watchdog names it
rm -rf "$W/out"; $MPI -np 3 "$B" train $ARGS --comm-timeout 3 > "$W/stop.log" 2>&1 &
job=$!
if wait_started; then
  victim=$(pid_of_rank 2); t0=$(date +%s); kill -STOP "$victim"
  timeout 40 tail --pid=$job -f /dev/null; wait $job; rc=$?; t1=$(date +%s)
  kill -KILL "$victim" 2>/dev/null
  # Rank 2 is named whichever way the timing falls: it had not yet entered
  # the collective ("never arrived: 2"), or it had posted its part and then
  # stopped, so its watchdog stopped answering ("world rank 2 (dead or hung"
  # / "(stalled ... s" once mpirun continued it).
  NAMED='ranks that never arrived: 2|world rank 2 \((dead or hung|stalled)'
  if [ $rc -ne 0 ] && grep -Eq "$NAMED" "$W/stop.log"; then
    ok "SIGSTOP of rank 2: exit $rc after $((t1 - t0)) s: $(grep -Em1 "$NAMED" "$W/stop.log")"
  else bad "SIGSTOP of rank 2: exit $rc after $((t1 - t0)) s"; tail -5 "$W/stop.log"; fi
else bad "training did not start"; tail -5 "$W/stop.log"; kill -KILL $job; fi

# 3. ranks that disagree on the configuration refuse to start
$MPI -np 1 "$B" train $ARGS --steps 5 : -np 1 "$B" train $ARGS --steps 6 > "$W/agree.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "ranks disagree on train.steps: rank 0 has '5' but rank 1 has '6'" "$W/agree.log"; then
  ok "disagreeing ranks refused: $(grep -o 'ranks disagree[^;]*' "$W/agree.log" | head -1)"
else bad "disagreeing ranks: exit $rc"; tail -5 "$W/agree.log"; fi
finish
