#!/usr/bin/env bash
# Graceful stop on SIGTERM / SIGINT (issue 11 case 4, issue 17 pre-emption):
#  1. SIGTERM to ONE rank of a 2-rank mpirun job mid-run: both ranks stop
#     after the same step, the checkpoint of that step is complete, exit 143;
#     --resume then reaches the losses and final parameters of an
#     uninterrupted run bit for bit.
#  2. SIGINT to a single-rank run: checkpoint, exit 130.
#  3. SIGTERM without --ckpt-dir: exit 143, says nothing was saved.
#  4. SIGTERM to the --max-restarts supervisor: it forwards to the ranks,
#     exits 143 without restarting, and leaves no process of the job behind.
#  5. SIGINT (Ctrl-C) to `shardlm train --nproc 2`: the same, exit 130.
source "${SL_SRC:?}/tests/lib/run.sh" signals mpi
JOBS=()
on_exit 'for p in "${JOBS[@]}"; do kill -9 "$p" 2>/dev/null; done'
mkdir -p "$W/model"
cp "$SL_SRC/tests/fixtures/tiny-1layer/config.json" "$W/model/" || exit 1
tiny_data "$W/data"
STEPS=1000
COMMON="--model $W/model --init random --data $W/data --data-order shuffled --seq-len 16 --micro-batch 2 --threads 1
 --peak-tflops 1 --steps $STEPS --warmup 5 --summary false --plot false --log-every 100000"
# waits until FILE has at least N lines (the run is mid-way), at most 60 s
wait_lines() { for _ in $(seq 600); do [ "$( { wc -l < "$1"; } 2>/dev/null || echo 0)" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }
# pids of processes whose command line holds STRING (the run's unique out dir)
pids_of() { pgrep -f -- "$1" || true; }
steps_in() { wc -l < "$1" | tr -d ' '; }

# ---- uninterrupted reference ----
$MPI -np 2 "$B" train $COMMON --out-dir "$W/ref" --metrics "$W/ref.jsonl" --save "$W/ref/model" > "$W/ref.log" 2>&1 \
  || { echo "reference run failed"; tail "$W/ref.log"; exit 1; }

# ---- 1. SIGTERM to one rank; resume bit-identical ----
$MPI -np 2 "$B" train $COMMON --out-dir "$W/a" --ckpt-dir "$W/a/ck" --ckpt-every 100000 --metrics "$W/a1.jsonl" \
  > "$W/a1.log" 2>&1 &
JOBS+=($!); MP=$!
wait_lines "$W/a1.jsonl" 30 || { echo "run a did not start"; tail "$W/a1.log"; exit 1; }
ONE=$(ps -o pid= --ppid "$MP" | head -1 | tr -d ' ')
kill -TERM "$ONE"
wait "$MP"; rc=$?
K=$(steps_in "$W/a1.jsonl")
[ $rc -eq 143 ] && ok "SIGTERM to one rank: mpirun exits 143" || { bad "SIGTERM to one rank: exit $rc, wanted 143"; tail "$W/a1.log"; }
[ "$K" -lt $STEPS ] && ok "stopped mid-run after step $K of $STEPS" || bad "the run was not stopped ($K steps)"
CK=$(printf "%s/a/ck/step-%06d" "$W" "$K")
[ -d "$CK" ] && [ "$(cat "$W/a/ck/latest" 2>/dev/null)" = "$(basename "$CK")" ] \
  && ok "checkpoint of step $K present and latest" || { bad "no checkpoint of step $K"; ls "$W/a/ck"; cat "$W/a/ck/latest"; }
grep -q "SIGTERM: stopping after step $K of $STEPS; checkpoint in" "$W/a1.log" \
  && ok "the log says where it stopped" || { bad "no stop message"; tail "$W/a1.log"; }
$MPI -np 2 "$B" train $COMMON --out-dir "$W/a" --ckpt-dir "$W/a/ck" --ckpt-every 100000 --resume \
  --metrics "$W/a2.jsonl" --save "$W/a/model" > "$W/a2.log" 2>&1 || { bad "resume failed"; tail "$W/a2.log"; }
grep -q "resumed from .* at step $K " "$W/a2.log" && ok "resumed at step $K" || { bad "did not resume at step $K"; tail "$W/a2.log"; }
if "$PY" - "$W" "$STEPS" <<'PY'; then ok "losses of steps 1..$STEPS bit-identical to the uninterrupted run"; else bad "losses differ"; fi
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
load = lambda p: [(j["step"], j["loss"]) for j in map(json.loads, open(p))]
ref, got = load(w + "/ref.jsonl"), load(w + "/a1.jsonl") + load(w + "/a2.jsonl")
if [s for s, _ in got] != list(range(1, n + 1)): sys.exit(print("steps:", [s for s, _ in got][:5], "...", len(got)) or 1)
diff = [(a, b) for a, b in zip(ref, got) if a != b]
sys.exit(print("first difference:", diff[0]) or 1 if diff else 0)
PY
cmp -s "$W/ref/model/model.safetensors" "$W/a/model/model.safetensors" \
  && ok "final parameters bit-identical" || bad "final parameters differ"

# ---- 2. SIGINT to a single-rank run ----
"$B" train $COMMON --out-dir "$W/b" --ckpt-dir "$W/b/ck" --metrics "$W/b.jsonl" > "$W/b.log" 2>&1 &
JOBS+=($!); P=$!
wait_lines "$W/b.jsonl" 20 || { echo "run b did not start"; tail "$W/b.log"; exit 1; }
kill -INT "$P"; wait "$P"; rc=$?
K=$(steps_in "$W/b.jsonl")
[ $rc -eq 130 ] && ok "SIGINT: exit 130" || { bad "SIGINT: exit $rc, wanted 130"; tail "$W/b.log"; }
[ -d "$(printf "%s/b/ck/step-%06d" "$W" "$K")" ] && ok "SIGINT: checkpoint of step $K" || bad "SIGINT: no checkpoint of step $K"

# ---- 3. no --ckpt-dir ----
"$B" train $COMMON --out-dir "$W/c" --metrics "$W/c.jsonl" > "$W/c.log" 2>&1 &
JOBS+=($!); P=$!
wait_lines "$W/c.jsonl" 20 || { echo "run c did not start"; tail "$W/c.log"; exit 1; }
kill -TERM "$P"; wait "$P"; rc=$?
[ $rc -eq 143 ] && grep -q "no --ckpt-dir: nothing saved" "$W/c.log" && ok "SIGTERM without --ckpt-dir: 143, says nothing saved" \
  || { bad "SIGTERM without --ckpt-dir: exit $rc"; tail -3 "$W/c.log"; }

# ---- 4. SIGTERM to the supervisor ----
"$B" train $COMMON --nproc 2 --max-restarts 3 --out-dir "$W/d" --ckpt-dir "$W/d/ck" --metrics "$W/d.jsonl" \
  > "$W/d.log" 2>&1 &
JOBS+=($!); P=$!
wait_lines "$W/d.jsonl" 20 || { echo "run d did not start"; tail "$W/d.log"; exit 1; }
N0=$(pids_of "$W/d/ck" | grep -vx "$P" | wc -l)
kill -TERM "$P"; wait "$P"; rc=$?
K=$(steps_in "$W/d.jsonl")
[ $rc -eq 143 ] && ok "supervisor: exit 143" || { bad "supervisor: exit $rc, wanted 143"; tail "$W/d.log"; }
grep -q "not restarting" "$W/d.log" && ! grep -q "restarting from the latest" "$W/d.log" \
  && ok "supervisor: no restart after a requested stop" || bad "supervisor restarted the job"
[ -d "$(printf "%s/d/ck/step-%06d" "$W" "$K")" ] && ok "supervisor: checkpoint of step $K" || bad "supervisor: no checkpoint of step $K"
sleep 0.5
LEFT=$(pids_of "$W/d/ck" | wc -l)
[ "$N0" -ge 3 ] && [ "$LEFT" -eq 0 ] && ok "supervisor: $N0 job processes before, none left after" \
  || { bad "supervisor: $N0 job processes before, $LEFT left after"; pids_of "$W/d/ck" | xargs -r ps -o pid,args -p; }

# ---- 5. SIGINT (Ctrl-C) to `--nproc 2`: the local mpirun's ranks checkpoint ----
"$B" train $COMMON --nproc 2 --out-dir "$W/e" --ckpt-dir "$W/e/ck" --metrics "$W/e.jsonl" > "$W/e.log" 2>&1 &
JOBS+=($!); P=$!
wait_lines "$W/e.jsonl" 20 || { echo "run e did not start"; tail "$W/e.log"; exit 1; }
kill -INT "$P"; wait "$P"; rc=$?
K=$(steps_in "$W/e.jsonl")
[ $rc -eq 130 ] && [ -d "$(printf "%s/e/ck/step-%06d" "$W" "$K")" ] && ok "--nproc 2, SIGINT: exit 130, checkpoint of step $K" \
  || { bad "--nproc 2, SIGINT: exit $rc"; tail -3 "$W/e.log"; }
sleep 0.5
[ "$(pids_of "$W/e/ck" | wc -l)" -eq 0 ] && ok "--nproc 2, SIGINT: no process left" || bad "--nproc 2: processes left"

finish
