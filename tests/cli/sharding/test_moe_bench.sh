#!/usr/bin/env bash
# `shardlm bench moe` (tools/bench_moe.c; docs/moe.md, "Measured") on tiny
# shapes: exits 0 and prints its three sections (MoE vs dense tokens/s, the
# grouped vs the dense GEMM on balanced and skewed groups, the all-to-all's
# share of the step at EP 2 and EP 4, world 4), each JSON line with finite
# positive figures; the dense model's parameters are the MoE's active ones
# less the router's E x C per layer. The all-to-all time it reads: an EP 2
# run's metrics carry alltoall_s and its per-rank summary the all-to-all line
# with the time inside its calls; an EP 1 run's metrics do not. Bad flags exit
# 2 naming the flag. Figures are printed, never asserted. ~10 s on 2 cores.
source "${SL_SRC:?}/tests/lib/run.sh" moe_bench mpi
timeout 300 "$B" bench moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 --experts 4 --top-k 2 \
  --expert-intermediate 32 --vocab 300 --batch 2 --seq 32 --steps 1 --threads 1 > "$W/out" 2> "$W/err"
rc=$?
if [ $rc -eq 0 ]; then ok "bench moe: exit 0"; else bad "bench moe: exit $rc"; tail -n 5 "$W/err" | sed 's/^/     /'; fi
"$PY" - "$W/out" <<'EOF' > "$W/check" 2>&1 && ok "bench moe: $(cat "$W/check")" || { bad "bench moe: output"; sed 's/^/     /' "$W/check"; }
import json, math, sys
text = open(sys.argv[1]).read()
for head in ("1. training tokens/s", "2. the experts' forward GEMMs", "3. the all-to-all at world 4"):
    assert head in text, f"no section '{head}'"
rows = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
sec = {}
for o in rows:
    assert o["bench"] == "moe"
    sec.setdefault(o["section"], []).append(o)
def pos(o, *keys):
    for k in keys:
        v = o[k]
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{o['section']}: {k} = {v!r}"
(t,) = sec["tokens"]
pos(t, "moe_tokens_per_s", "dense_tokens_per_s", "ratio", "moe_params", "moe_active_params", "dense_params")
assert t["moe_active_params"] - t["dense_params"] == 2 * 4 * 64, "active - dense != layers x E x C"
assert sorted(o["routing"] for o in sec["gemm"]) == ["balanced", "skewed"]
for o in sec["gemm"]:
    pos(o, "grouped_gflops", "dense_gflops", "ratio")
    assert o["rows"] == 2 * 32 * 2
assert sorted(o["ep"] for o in sec["alltoall"]) == [2, 4]
for o in sec["alltoall"]:
    pos(o, "step_s", "alltoall_s", "alltoall_frac", "tokens_per_s")
    assert o["alltoall_frac"] < 1, f"EP {o['ep']}: share {o['alltoall_frac']}"
print("3 sections; " + ", ".join(f"EP {o['ep']} all-to-all {100 * o['alltoall_frac']:.0f}%" for o in sec["alltoall"]))
EOF
# the figures it reads: alltoall_s in the metrics at EP 2 only, the summary's time inside the all-to-all calls
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_data "$W/data"
TR="train --model $W/mixtral --init random --data $W/data --steps 2 --seq-len 16 --micro-batch 2 --threads 1 --plot false"
$MPI -np 4 "$B" $TR --ep 2 --out-dir "$W/ep2" > "$W/ep2.log" 2>&1 && "$B" $TR --out-dir "$W/ep1" > "$W/ep1.log" 2>&1 &&
  [ "$(grep -c '"alltoall_s": [0-9.]*[,}]' "$W/ep2/metrics.jsonl")" = 2 ] && ! grep -q alltoall_s "$W/ep1/metrics.jsonl" &&
  [ "$(grep -c 'all-to-all [0-9.]*M, [0-9.]* s inside its calls ([0-9.]*%)' "$W/ep2.log")" = 4 ] &&
  ok "EP 2: alltoall_s in each metrics line, the time in each rank's all-to-all line; EP 1: none" ||
  { bad "alltoall_s / the summary's all-to-all line"; tail -n 12 "$W/ep2.log" | sed 's/^/     /'; }
# bad flags: exit 2, naming the flag
for args in "--bogus 1" "--top-k 0" "--experts 6" "--heads" "--top-k 9 --experts 8"; do
  "$B" bench moe $args > "$W/o" 2> "$W/e"
  rc=$?
  flag=$(echo "$args" | cut -d' ' -f1)
  if [ $rc -eq 2 ] && grep -q -- "$flag" "$W/e"; then ok "bench moe $args: exit 2 naming $flag"
  else bad "bench moe $args: exit $rc, $(head -c 200 "$W/e")"; fi
done
finish
