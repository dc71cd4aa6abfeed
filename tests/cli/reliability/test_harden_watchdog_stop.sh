#!/usr/bin/env bash
# tests/cli/reliability/test_harden_watchdog_stop.sh — a SIGSTOPped TP peer is named by the
# watchdog. A tiny Llama trains at -np 4 --tp 2 (DP 2 x TP 2) and at -np 2
# --tp 2; world rank 1 (a TP peer of rank 0) is stopped after training
# starts. Every rank must end within BOUND s of the stop, the job exits 3
# (the watchdog's MPI_Abort), a report names the stopped world rank ("world
# rank 1 (dead or hung)", or "world rank 1 (stalled ..." once mpirun has
# continued it) and none says "ranks that never arrived: none (all entered
# it...)": the rank that reports first may be a DP peer waiting on rank 0,
# which is itself stuck in the TP all-reduce with rank 1. SL_KEEP=1 prints
# every watchdog report at the end.
source "${SL_SRC:?}/tests/lib/run.sh" harden_watchdog_stop mpi
on_exit 'for p in $(pgrep -f -- "$W/model"); do kill -KILL $p 2>/dev/null; done; [ -n "${SL_KEEP:-}" ] && grep -h "did not complete" "$W"/np*.log'
tiny_model "$W/model" llama
tiny_data "$W/data"
T=5
BOUND=30

# pid of world rank R of the run writing into OUT
pid_of_rank() { # out rank
  local p
  for p in $(pgrep -f -- "--out-dir $1"); do
    tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }
  done
}

case_stop() { # np victim
  local np=$1 v=$2 out="$W/out$1" log="$W/np$1.log" job t0 t1 rc victim left
  $MPI -np $np "$B" train --model "$W/model" --init random --data "$W/data" --steps 100000 --micro-batch 2 --seq-len 16 \
    --threads 1 --tp 2 --comm-timeout $T --plot false --summary false --out-dir "$out" > "$log" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.2; done
  victim=$(pid_of_rank "$out" $v)
  if [ ! -s "$out/metrics.jsonl" ] || [ -z "$victim" ]; then
    bad "np $np: training did not start"; tail -5 "$log"; kill -KILL $job; wait $job 2> /dev/null; return
  fi
  sleep 0.5
  t0=$(date +%s); kill -STOP "$victim"
  timeout $((BOUND + 30)) tail --pid=$job -f /dev/null; wait $job; rc=$?
  # every rank (the stopped one too) must be gone
  for _ in $(seq 50); do left=$(pgrep -f -- "--out-dir $out" | wc -l); [ "$left" -eq 0 ] && break; sleep 0.2; done
  t1=$(date +%s)
  kill -KILL "$victim" 2> /dev/null
  local what="np $np --tp 2, SIGSTOP world rank $v: exit $rc after $((t1 - t0)) s"
  if [ $rc -ne 3 ] || [ $((t1 - t0)) -ge $BOUND ] || [ "$left" -ne 0 ]; then
    bad "$what ($left rank(s) left; want exit 3 within $BOUND s)"; grep shardlm: "$log" | tail -5
  elif ! grep -Eq "world rank $v \((dead or hung|stalled)" "$log"; then
    bad "$what: no report names world rank $v"; grep shardlm: "$log" | tail -5
  elif grep -q "none (all entered it" "$log"; then
    bad "$what: a report says 'none (all entered it': $(grep -m1 'none (all entered it' "$log")"
  else ok "$what: $(grep -Em1 "world rank $v \((dead or hung|stalled)" "$log")"; fi
}
case_stop 4 1
case_stop 2 1
finish
