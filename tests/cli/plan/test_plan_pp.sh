#!/usr/bin/env bash
# tests/cli/plan/test_plan_pp.sh — the planner's engine check per pipeline stage
# (shardlm plan --engine-check --pp P, the dry run of engine/dryrun.c per stage) against what the
# engine measures per stage (shardlm train --pp P under mpirun, the metrics'
# "stages"): gpipe P2, 1f1b P2 and P3, interleaved P2 V2, ZeRO 1 and 3,
# DP 2 x PP 2, tied embeddings. Per step and per stage: every arena the
# engine's code allocates (params grads optim gather acts workspace), the DP
# bytes ("comm_bytes") and the PP bytes sent and received must be EQUAL;
# "peak_bytes" too once the CPU kernels' scratch is added (the rule of
# tests/cli/plan/test_plan_tp.sh). Independently of both: stage s's activation arena
# = the builder's peak in-flight micro-batches of rank s (`shardlm
# pp-schedule --json`, pipeline/build.c) x one micro-batch's activations of
# the stage's units, counted from the config here (every stage of gpipe P2
# and 1f1b P3). Negative control: a gpipe prediction must not match a 1f1b
# run. Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC (source root).
source "${SL_SRC:?}/tests/lib/run.sh" plan_pp mpi
BIN=$B
export OMP_NUM_THREADS=1
# tied: the head reads unit 0 (the last stage holds a copy)
# 4 layers; per token of a layer: ln1, xmid, ln2 (C each), qkv ((nh + 2 kv) hd), att (nh hd), lse (nh),
# two rstd, gate|up (2 I), h (I)
tiny_model "$W/llama" llama
tiny_model "$W/tied" tied
tiny_data "$W/data"

# case: name model world P schedule flags...   (train and plan take the same flag names)
run_case() {
  local name=$1 model=$2 world=$3 P=$4 sched=$5
  shift 5
  local m="$W/$name.jsonl" p="$W/$name.plan.json" log="$W/$name.log"
  if ! timeout 120 $MPI -np "$world" "$BIN" train --model "$W/$model" --init random --data "$W/data" --steps 2 \
      --threads 1 --seq-len 16 --micro-batch 2 --grad-accum 4 --pp "$P" --pp-schedule "$sched" --metrics "$m" \
      --out-dir "$W/out_$name" --plot false --summary false "$@" >"$log" 2>&1; then
    bad "$name: train failed"; tail -15 "$log"; return
  fi
  if ! "$BIN" plan --engine-check --model "$W/$model" --world "$world" --seq-len 16 --micro-batch 2 \
      --grad-accum 4 --pp "$P" --pp-schedule "$sched" "$@" --json >"$p" 2>"$log.plan"; then
    bad "$name: plan failed"; cat "$log.plan"; return
  fi
  local out
  out=$("$PY" - "$m" "$p" "$P" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
plan = json.load(open(sys.argv[2]))
P = int(sys.argv[3])
bad = []
if len(steps) != 2:
    bad.append(f"{len(steps)} metrics lines, want 2")
if len(plan["stages"]) != P:
    bad.append(f"plan has {len(plan['stages'])} stages, want {P}")
scratch = [0] * P  # each stage's CPU scratch arena as the previous step left it
for st in steps:
    s = st["step"]
    if len(st.get("stages", [])) != P:
        bad.append(f"step {s}: {len(st.get('stages', []))} stages in the metrics, want {P}")
        continue
    if st["stages"][0]["arena_peak"] != st["arena_peak"] or st["stages"][0]["peak_bytes"] != st["peak_bytes"]:
        bad.append(f"step {s}: stage 0's figures differ from the line's own")
    for e, q in zip(st["stages"], plan["stages"]):
        g = e["stage"]
        for a in ("params", "grads", "optim", "gather", "acts", "workspace"):
            if q["arena_peak"][a] != e["arena_peak"][a]:
                bad.append(f"step {s} stage {g} {a}: engine {e['arena_peak'][a]} plan {q['arena_peak'][a]}")
        want = max(q["peak_bytes"] + scratch[g], q["start_bytes"] + e["arena_peak"]["scratch"])
        if want != e["peak_bytes"]:
            bad.append(f"step {s} stage {g} peak_bytes: engine {e['peak_bytes']} plan {want}")
        scratch[g] = e["arena_peak"]["scratch"]
        for k in ("comm_bytes", "pp_send_bytes", "pp_recv_bytes"):
            if q[k] != e[k]:
                bad.append(f"step {s} stage {g} {k}: engine {e[k]} plan {q[k]}")
        if q["pp_send_bytes"] == 0 or q["pp_recv_bytes"] == 0:
            bad.append(f"stage {g}: the plan moves no PP bytes")  # a check that cannot fail is no check
q = plan["stages"]
print("OK" if not bad else "BAD", "; ".join(bad) if bad else
      "acts " + "/".join(str(x["arena_peak"]["acts"]) for x in q) + " pp sent " +
      "/".join(str(x["pp_send_bytes"]) for x in q) + " dp " + "/".join(str(x["comm_bytes"]) for x in q))
PYEOF
)
  case "$out" in
    OK*) ok "$name (exact: ${out#OK })" ;;
    *) bad "$name: ${out#BAD }" ;;
  esac
}

# acts: stage s's activation arena = peak in-flight of rank s (the builder's) x one micro-batch's
# activations of its units, from the config: per layer 390 floats per token (see the config above),
# k+1 residual-stream buffers of N C for k layers, the last stage's head lnf (N C), rstd, lse, losses (N)
acts_case() { # name P schedule
  local name=$1 P=$2 sched=$3
  "$BIN" pp-schedule --pp "$P" --micro-batches 4 --pp-schedule "$sched" --model "$W/llama" --bytes 1 --json \
    >"$W/$name.sched.json" || { bad "$name: pp-schedule"; return; }
  local out
  out=$("$PY" - "$W/$name.jsonl" "$W/$name.sched.json" "$P" <<'PYEOF'
import json, sys
line = json.loads(open(sys.argv[1]).readline())
sc = json.load(open(sys.argv[2]))
P = int(sys.argv[3])
C, I, nh, kv, hd, N = 32, 64, 4, 2, 8, 2 * 16
layer = 3 * C + (nh + 2 * kv) * hd + nh * hd + nh + 2 + 3 * I
bad, seen = [], []
for s in range(P):
    k = sc["layout"][s]
    one = 4 * (k * N * layer + (k + 1) * N * C + (N * C + 3 * N if s == P - 1 else 0))
    fl = sc["ranks"][s]["peak_inflight"]
    got = line["stages"][s]["arena_peak"]["acts"]
    seen.append(f"{got}={fl}x{one}")
    if got != fl * one:
        bad.append(f"stage {s}: acts {got}, want {fl} in flight x {one} ({k} layers)")
print("OK " + " ".join(seen) if not bad else "BAD " + "; ".join(bad))
PYEOF
)
  case "$out" in
    OK*) ok "$name acts per stage = in-flight x one micro-batch (${out#OK })" ;;
    *) bad "$name acts: ${out#BAD }" ;;
  esac
}

run_case g2_z1 llama 2 2 gpipe --zero 1
acts_case g2_z1 2 gpipe
run_case f2_z3 llama 2 2 1f1b --zero 3
acts_case f2_z3 2 1f1b
run_case f3_z1 llama 3 3 1f1b --zero 1
acts_case f3_z1 3 1f1b
run_case i2v2_z3 llama 2 2 interleaved --pp-virtual 2 --zero 3
run_case d2p2_z3 llama 4 2 1f1b --zero 3
run_case tied_f2_z1 tied 2 2 1f1b --zero 1
# TP x PP (world = TP x DP x PP): TP 2 x PP 2 with sequence parallelism (the boundary is the s/T slice), and at ZeRO-3
run_case t2p2_sp llama 4 2 1f1b --tp 2 --sequence-parallel --zero 1
run_case t2p2_z3 llama 4 2 1f1b --tp 2 --zero 3

# negative control: a gpipe prediction (4 micro-batches in flight) must not match the 1f1b run (2)
if [ -f "$W/f2_z3.jsonl" ] && "$BIN" plan --engine-check --model "$W/llama" --world 2 --seq-len 16 \
    --micro-batch 2 --grad-accum 4 --pp 2 --pp-schedule gpipe --zero 3 --json >"$W/neg.json" 2>/dev/null; then
  if "$PY" -c "
import json, sys
e = json.loads(open(sys.argv[1]).readline())['stages']; q = json.load(open(sys.argv[2]))['stages']
sys.exit(0 if all(a['arena_peak']['acts'] != b['arena_peak']['acts'] for a, b in zip(e, q)) else 1)" \
      "$W/f2_z3.jsonl" "$W/neg.json"; then
    ok "negative control (a gpipe prediction differs from the 1f1b run on every stage)"
  else
    bad "negative control: a gpipe prediction matches the 1f1b run"
  fi
else
  bad "negative control: no run or no plan"
fi
# --pp 1 has no "stages" (its line is unchanged)
if timeout 60 $MPI -np 1 "$BIN" train --model "$W/llama" --init random --data "$W/data" --steps 1 --threads 1 \
    --seq-len 16 --micro-batch 2 --metrics "$W/p1.jsonl" --out-dir "$W/out_p1" --plot false \
    --summary false >"$W/p1.log" 2>&1 && ! grep -q '"stages"' "$W/p1.jsonl"; then
  ok "--pp 1: no stages field"
else
  bad "--pp 1 metrics"
fi
# train's refusals are the plan's (exit 2, the builder's message)
msg=$("$BIN" plan --engine-check --model "$W/llama" --world 2 --seq-len 16 --micro-batch 2 --grad-accum 1 \
  --pp 2 --pp-schedule 1f1b 2>&1 >/dev/null); rc=$?
if [ "$rc" = 2 ] && echo "$msg" | grep -q "at least as many micro-batches as stages"; then
  ok "refusal: $msg"
else
  bad "refusal: exit $rc, '$msg'"
fi
msg=$("$BIN" plan --engine-check --model "$W/llama" --world 3 --seq-len 16 --micro-batch 2 --grad-accum 4 \
  --pp 2 2>&1 >/dev/null); rc=$?
if [ "$rc" = 2 ] && echo "$msg" | grep -q -- "--pp 2"; then
  ok "refusal: $msg"
else
  bad "refusal (world 3, --pp 2): exit $rc, '$msg'"
fi

finish
