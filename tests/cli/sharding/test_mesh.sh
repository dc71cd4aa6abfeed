#!/usr/bin/env bash
# Placement and the mesh report (issue 17): under mpirun --bind-to none each
# of 2 ranks binds its threads to its own share of the node's cores (when
# hwloc is built in and the node has >= 2 cores); a launcher's binding is
# kept; SL_BIND=0 binds nothing; the report names the node and NUMA node of
# every rank; binding changes no number (losses equal bit for bit).
source "${SL_SRC:?}/tests/lib/run.sh" mesh mpi
mkdir -p "$W/model"
cp "$SL_SRC/tests/fixtures/tiny-1layer/config.json" "$W/model/" || exit 1
ARGS="--model $W/model --init random --seq-len 16 --micro-batch 2 --threads 1 --peak-tflops 1 --steps 5 --summary false --plot false"
H=$(hostname)
# $MPI binds nothing (--bind-to none); run b's later --bind-to core wins
$MPI -np 2 "$B" train $ARGS --out-dir "$W/a" > "$W/a.log" 2>&1 || { bad "run a failed"; tail "$W/a.log"; }
grep -q "mesh: 2 ranks on 1 node" "$W/a.log" && ok "report: 2 ranks on 1 node" || bad "no mesh summary"
grep -q "mesh: node $H: ranks 0-1 | NUMA [0-9?]*: ranks 0-1" "$W/a.log" && ok "report: node and NUMA node of the ranks" \
  || { bad "no node line"; grep mesh "$W/a.log"; }
cores=$(lscpu -p=core 2>/dev/null | grep -v '^#' | sort -u | wc -l)
if grep -q "built without hwloc" "$W/a.log"; then echo "hwloc not built in: binding checks skipped"
elif [ "$cores" -ge 2 ]; then
  c0=$(sed -n 's/.*mesh: rank 0 on .*: cpus \([^ ]*\) .*bound$/\1/p' "$W/a.log")
  c1=$(sed -n 's/.*mesh: rank 1 on .*: cpus \([^ ]*\) .*bound$/\1/p' "$W/a.log")
  [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$c1" ] && ok "ranks bound to different cores ($c0 | $c1)" \
    || { bad "ranks not bound apart"; grep mesh "$W/a.log"; }
fi
$MPI --bind-to core -np 2 "$B" train $ARGS --out-dir "$W/b" > "$W/b.log" 2>&1 || { bad "run b failed"; tail "$W/b.log"; }
grep -q "built without hwloc\|bound by the launcher" "$W/b.log" && ok "a launcher's binding is kept" \
  || { bad "launcher binding not kept"; grep mesh "$W/b.log"; }
SL_BIND=0 $MPI -np 2 -x SL_BIND "$B" train $ARGS --out-dir "$W/c" > "$W/c.log" 2>&1 || { bad "run c failed"; tail "$W/c.log"; }
grep -q "built without hwloc\|not bound (SL_BIND=0)" "$W/c.log" && ok "SL_BIND=0 binds nothing" || { bad "SL_BIND=0 ignored"; grep mesh "$W/c.log"; }
cmp -s <(cut -d, -f1-2 "$W/a/metrics.jsonl") <(cut -d, -f1-2 "$W/c/metrics.jsonl") \
  && ok "bound and unbound runs: same losses, bit for bit" || bad "binding changed the losses"
# a pretended 2-node layout (SL_MESH_HOSTS): the report and the shard-group check
mesh4() { # hosts shard-group log
  SL_MESH_HOSTS=$1 $MPI -np 4 -x SL_MESH_HOSTS "$B" train $ARGS --shard-group "$2" --out-dir "$W/$3" > "$W/$3.log" 2>&1 \
    || { bad "run $3 failed"; tail "$W/$3.log"; }
}
mesh4 a,a,b,b 2 d
grep -q "mesh: 4 ranks on 2 nodes" "$W/d.log" && grep -q "mesh: node a: ranks 0-1 " "$W/d.log" && grep -q "mesh: node b: ranks 2-3 " "$W/d.log" \
  && ok "2 pretended nodes: ranks 0-1 on a, 2-3 on b" || { bad "2-node report"; grep mesh "$W/d.log"; }
grep -q "spans nodes" "$W/d.log" && bad "shard groups inside nodes warned about" || ok "shard groups of 2 inside nodes: no warning"
mesh4 a,b,a,b 2 e
grep -q "warn: mesh: shard group 0 (ranks 0-1) spans nodes" "$W/e.log" && ok "shard group across nodes: warned" \
  || { bad "no warning for a shard group across nodes"; grep mesh "$W/e.log"; }
finish
