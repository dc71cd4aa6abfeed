#!/usr/bin/env bash
# World size 1 without MPI (docs/comm.md, "World backends"): build/shardlm is
# not linked against libmpi (ldd), a world-size-1 training run started
# without a launcher loads no MPI library (LD_DEBUG=libs lists every object
# the loader maps, dlopen'ed ones too), and its per-step losses and saved
# parameters are bit-identical to the same run on the MPI backend (SL_COMM=mpi
# and mpirun -np 1, both of which must map libmpi: the check can fail).
# SL_COMM=self under a 2-rank mpirun is refused.
source "${SL_SRC:?}/tests/lib/run.sh" nompi numpy mpi
tiny_model "$W/model" llama '"num_hidden_layers": 1, "rope_theta": null'
tiny_data "$W/data"
A="--model $W/model --init random --data $W/data --data-order sequential --steps 6 --micro-batch 2 --seq-len 16 \
  --threads 1 --summary false --plot false --zero 3"

if ldd "$B" | grep -q 'libmpi'; then bad "ldd shardlm lists libmpi"; else ok "ldd shardlm: no libmpi"; fi

# ws1, no launcher: no MPI library mapped
env -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMIX_RANK -u SLURM_STEP_NUM_TASKS -u SL_COMM LD_DEBUG=libs \
  "$B" train $A --out-dir "$W/self" --save "$W/self/model" > "$W/self.log" 2> "$W/self.ld"
rc=$?
if [ $rc -ne 0 ]; then bad "ws1 run without MPI (exit $rc)"; tail -5 "$W/self.ld"; fi
if grep -q 'calling init: .*libmpi' "$W/self.ld"; then bad "ws1 run mapped libmpi"; grep 'init: .*mpi' "$W/self.ld" | head -3
elif grep -q 'calling init: .*libc.so' "$W/self.ld"; then ok "ws1 run: no libmpi mapped (LD_DEBUG=libs)"
else bad "LD_DEBUG=libs printed nothing: cannot check"; fi

# the same run on the MPI backend: libmpi mapped, identical results
SL_COMM=mpi LD_DEBUG=libs "$B" train $A --out-dir "$W/mpi" --save "$W/mpi/model" > "$W/mpi.log" 2> "$W/mpi.ld" ||
  { bad "SL_COMM=mpi run failed"; tail -5 "$W/mpi.ld"; }
if grep -q 'calling init: .*libmpi' "$W/mpi.ld"; then ok "SL_COMM=mpi maps libmpi (the check sees it)"
else bad "SL_COMM=mpi did not map libmpi"; fi
if $CMP "$W/self" "$W/mpi" --exact; then ok "self == SL_COMM=mpi (bit-exact losses and parameters)"
else bad "self != SL_COMM=mpi"; fi
$MPI -np 1 "$B" train $A --out-dir "$W/np1" --save "$W/np1/model" > "$W/np1.log" 2>&1 ||
  { bad "mpirun -np 1 run failed"; tail -5 "$W/np1.log"; }
if $CMP "$W/self" "$W/np1" --exact; then ok "self == mpirun -np 1 (bit-exact)"; else bad "self != mpirun -np 1"; fi

# SL_COMM=self under a launcher of 2 ranks: a clear refusal, not 2 lone runs
out=$(SL_COMM=self $MPI -np 2 -x SL_COMM "$B" train $A --out-dir "$W/bad" 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q "SL_COMM=self"; then ok "SL_COMM=self under mpirun -np 2 refused"
else bad "SL_COMM=self under mpirun -np 2 not refused"; echo "$out" | tail -3; fi

finish
