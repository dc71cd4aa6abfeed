#!/usr/bin/env bash
# shardlm under a real Slurm (issue 17), on this one machine: the test starts
# its own munged, slurmctld and slurmd (config, key, sockets, state and logs
# in a temp dir, non-default ports), then
#  1. `srun -n 2 --mpi=pmix shardlm train` (ZeRO-3, no mpirun) reaches the
#     losses and final parameters of `mpirun -np 2` bit for bit;
#  2. srun without a PMIx bootstrap is refused with exit 2 and a hint;
#  3. examples/slurm/preemptible.sbatch (GPU lines dropped, 2 tasks) gets
#     SIGTERM in its batch shell mid-run (as --signal=B:TERM@120 does): the
#     ranks checkpoint and exit 143, the job requeues itself, the second run
#     resumes, and the losses of all steps equal an uninterrupted run's.
# It stops the daemons it started, by process id. Skipped (77) only where
# Slurm is not installed or its daemons cannot start (the reason is printed).
source "${SL_SRC:?}/tests/lib/run.sh" slurm mpi
SRC=$SL_SRC
for t in munged slurmctld slurmd srun sbatch scontrol scancel sinfo; do
  command -v $t >/dev/null || skip "$t is not installed (tools/setup installs slurm-wlm and munge)"
done
[ "$(id -u)" -eq 0 ] || skip "the test cluster runs its daemons as root (SlurmUser=root)"
chmod 755 "$W"
DAEMONS=()
stop_cluster() {
  if [ -n "${SLURM_CONF:-}" ] && [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    scancel --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null
    for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  for p in $(pgrep -f -- "$W/" 2>/dev/null); do  # job leftovers (not the daemons, stopped below)
    case " $$ ${DAEMONS[*]} " in *" $p "*) ;; *) kill -9 "$p" 2>/dev/null;; esac
  done
  for p in "${DAEMONS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${DAEMONS[@]}"; do for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done; kill -9 "$p" 2>/dev/null; done
}
on_exit stop_cluster
# cluster_skip MSG: skip (run.sh), after the tail of every daemon log
cluster_skip() { for f in "$W"/log/*; do echo "--- $f"; tail -5 "$f"; done; skip "$1"; }

# ---- the one-node cluster ----
H=$(hostname -s)
mkdir -p "$W/munge" "$W/state" "$W/spool" "$W/log" "$W/run"
chmod 700 "$W/munge"
head -c 1024 /dev/urandom > "$W/munge/munge.key"; chmod 600 "$W/munge/munge.key"
munged -F --force --socket="$W/munge/sock" --key-file="$W/munge/munge.key" --pid-file="$W/munge/pid" \
  --log-file="$W/log/munged.log" --seed-file="$W/munge/seed" 2>>"$W/log/munged.log" &
DAEMONS+=($!)
for _ in $(seq 50); do [ -S "$W/munge/sock" ] && break; sleep 0.1; done
[ -S "$W/munge/sock" ] || cluster_skip "munged did not start (no socket $W/munge/sock)"
export SLURM_CONF=$W/slurm.conf
up=0
for attempt in 1 2 3; do  # a port in use: try another one
P=$((20000 + RANDOM % 20000))
cat > "$W/slurm.conf" <<EOF
ClusterName=sltest
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$P
SlurmdPort=$((P + 1))
SrunPortRange=$((P + 2))-$((P + 200))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge/sock
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=30
MinJobAge=600
NodeName=$H NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
slurmctld -D -f "$SLURM_CONF" > "$W/log/slurmctld.out" 2>&1 &
CTLD=$!
slurmd -D -f "$SLURM_CONF" > "$W/log/slurmd.out" 2>&1 &
SLURMD=$!
DAEMONS+=($CTLD $SLURMD)
for _ in $(seq 100); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && { up=1; break; }
  kill -0 $CTLD 2>/dev/null && kill -0 $SLURMD 2>/dev/null || break
  sleep 0.2
done
[ $up -eq 1 ] && break
kill $CTLD $SLURMD 2>/dev/null; wait $CTLD $SLURMD 2>/dev/null
done
[ $up -eq 1 ] || cluster_skip "slurmctld/slurmd did not bring node $H up in 3 tries (sinfo: $(sinfo -h -o %t 2>&1 | head -1))"
srun --mpi=list 2>&1 | grep -qw pmix || cluster_skip "srun has no pmix plugin (srun --mpi=list; slurm-wlm-basic-plugins)"
echo "cluster up: node $H, slurmctld port $P, $(srun --version)"

mkdir -p "$W/model"
cp "$SRC/tests/fixtures/tiny-1layer/config.json" "$W/model/" || exit 1
tiny_data "$W/data"
same_losses() { # a.jsonl b.jsonl steps
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
load = lambda p: [(j["step"], j["loss"]) for j in map(json.loads, open(p))]
a, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
if [s for s, _ in b] != list(range(1, n + 1)): sys.exit(print("steps:", len(b), "lines") or 1)
d = [(x, y) for x, y in zip(a, b) if x != y]
sys.exit(print("first difference:", d[0]) or 1 if d else 0)
PY
}

# ---- 1. srun vs mpirun ----
ARGS="--model $W/model --init random --data $W/data --zero 3 --seq-len 16 --micro-batch 2 --threads 1 --peak-tflops 1
 --steps 20 --warmup 3 --summary false --plot false"
$MPI -np 2 "$B" train $ARGS --out-dir "$W/m" --save "$W/m/model" > "$W/m.log" 2>&1 || { bad "mpirun run failed"; tail "$W/m.log"; }
srun -n 2 --mpi=pmix "$B" train $ARGS --out-dir "$W/s" --save "$W/s/model" > "$W/s.log" 2>&1 \
  && ok "srun -n 2 --mpi=pmix shardlm train (ZeRO-3) ran" || { bad "srun run failed"; tail "$W/s.log"; }
grep -q "2 ranks (DP 2 x TP 1 x PP 1), ZeRO-3" "$W/s.log" && ok "srun: one job of 2 ranks" || bad "srun: not one 2-rank job"
same_losses "$W/m/metrics.jsonl" "$W/s/metrics.jsonl" 20 && ok "srun losses = mpirun losses, bit for bit" || bad "srun losses differ"
cmp -s "$W/m/model/model.safetensors" "$W/s/model/model.safetensors" && ok "srun final parameters = mpirun's" \
  || bad "srun final parameters differ"

# ---- 2. srun without PMIx ----
srun -n 2 --mpi=none "$B" train $ARGS --out-dir "$W/n" > "$W/n.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "srun --mpi=pmix" "$W/n.log" && ok "srun without PMIx: exit 2 naming --mpi=pmix" \
  || { bad "srun without PMIx: exit $rc"; tail -3 "$W/n.log"; }

# ---- 3. pre-emptible job: SIGTERM mid-run, requeue, resume ----
STEPS=1500
TARGS="--model $W/model --init random --data $W/data --zero 3 --seq-len 16 --micro-batch 2 --threads 1 --peak-tflops 1
 --steps $STEPS --warmup 5 --data-order shuffled --summary false --plot false --log-every 100000 --ckpt-every 100000"
$MPI -np 2 "$B" train $TARGS --out-dir "$W/ref" > "$W/ref.log" 2>&1 || { bad "reference run failed"; tail "$W/ref.log"; }
sed -e '/--gpus-per-node/d' -e '/--cpus-per-task/d' -e 's/--ntasks-per-node=8/--ntasks-per-node=2/' \
  "$SRC/examples/slurm/preemptible.sbatch" > "$W/job.sbatch"
J=$(SHARDLM=$B CKPT_DIR=$W/job/ck OUT_DIR=$W/job/out TRAIN_ARGS=$TARGS \
    sbatch --parsable --output="$W/job.out" --chdir="$W" "$W/job.sbatch") || { bad "sbatch failed"; J=""; }
M=$W/job/out/metrics.jsonl
for _ in $(seq 600); do [ "$( { wc -l < "$M"; } 2>/dev/null || echo 0)" -ge 30 ] && break; sleep 0.1; done
scancel --signal=TERM --batch "$J"  # what --signal=B:TERM@120 does before the time limit
requeued=0
for _ in $(seq 300); do  # the job requeues itself; Slurm holds a requeued job ~2 min: release it now
  if scontrol show job "$J" 2>/dev/null | grep -q "Restarts=1" && squeue -h -j "$J" -o %T | grep -q PENDING; then
    requeued=1; scontrol update JobId="$J" StartTime=now; break
  fi
  sleep 0.1
done
[ $requeued -eq 1 ] && ok "the job requeued itself after SIGTERM" || bad "the job was not requeued ($(squeue -h -j "$J" -o %T))"
state=""
for _ in $(seq 600); do
  state=$(scontrol show job "$J" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT) break;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] && ok "the resumed job completed" || bad "job state $state"
K=$(sed -n 's/.*SIGTERM: stopping after step \([0-9]*\) of.*/\1/p' "$W/job.out" | head -1)
[ -n "$K" ] && [ "$K" -lt $STEPS ] && ok "first run stopped on SIGTERM after step $K of $STEPS" || bad "no SIGTERM stop in the job output"
grep -q "training exited with status 143" "$W/job.out" && ok "srun exit status 143 after the checkpoint" || bad "no exit status 143"
grep -q "resumed from .* at step $K " "$W/job.out" && ok "second run resumed at step $K" || bad "second run did not resume at step ${K:-?}"
same_losses "$W/ref/metrics.jsonl" "$M" $STEPS && ok "losses of all $STEPS steps = uninterrupted run, bit for bit" \
  || bad "losses after requeue differ"
[ $fail -eq 0 ] || { echo "--- job output"; cat "$W/job.out"; }
[ -n "${SL_SLURM_KEEP:-}" ] && cp "$W/job.out" "$W/s.log" "$W/job.sbatch" "$SL_SLURM_KEEP/"  # for the docs
finish
