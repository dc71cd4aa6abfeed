#!/usr/bin/env bash
# tests/cli/plan/test_plan_pp_search.sh — the planner's pipeline recommendations are
# runnable (issue 14): for a tiny Llama on 4 "GPUs" the search's PP
# candidates carry a `shardlm train ... --pp P --pp-schedule 1f1b` command
# with --grad-accum m in [P, 8 P]; the recommended one and the best PP 2
# candidate train as printed (2 steps, mpirun), their logged layout is a
# pipeline of P stages; and the planner's bubble share of the step,
# bubble_s / (compute + bubble), equals (P-1)/(m+P-1) and the idle share of
# the static schedule that `train --pp-dry-run` prints for the same command
# (pipeline/build.c, an independent computation). TP x PP candidates are
# runnable too: their command carries --tp T --pp P. A PP recommendation
# says its memory and bytes are the engine's dry run of each stage.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC (source root).
source "${SL_SRC:?}/tests/lib/run.sh" plan_pp_search mpi
BIN=$B
tiny_model "$W/llama" llama '"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 301,
 "rms_norm_eps": null, "rope_theta": null'
if ! "$BIN" plan --model "$W/llama" --gpus 4 --gpu-mem 80G --seq-len 16 --global-batch 256 --dtype fp32 \
    --top 1000 --json > "$W/plan.json" 2> "$W/plan.err"; then
  bad "plan failed"; cat "$W/plan.err"; finish
fi
# every PP candidate: m in [P, 8P]; runnable with a --pp command (and --tp T for TP x PP)
out=$("$PY" - "$W/plan.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bad, npp = [], 0
for c in j["candidates"]:
    if c["pp"] < 2:
        continue
    npp += 1
    P, m = c["pp"], c["grad_accum"]
    if not P <= m <= 8 * P:
        bad.append("m %d at P %d" % (m, P))
    if not c["runnable"]:
        bad.append("not runnable at TP %d x PP %d" % (c["tp"], P))
    if c["tp"] > 1 and "--tp %d " % c["tp"] not in c.get("command", ""):
        bad.append("command without --tp: %r" % c.get("command"))
    if c["runnable"] and "--pp %d --pp-schedule 1f1b" % P not in c.get("command", ""):
        bad.append("command %r" % c.get("command"))
    bubble = c["bubble_s"] / (c["compute_s"] + c["recompute_s"] + c["bubble_s"])
    if abs(bubble - (P - 1) / (m + P - 1)) > 1e-9:
        bad.append("bubble %.6f at P %d m %d" % (bubble, P, m))
if npp == 0:
    bad.append("no pipeline candidates")
print("OK %d pipeline candidates" % npp if not bad else "BAD " + "; ".join(bad[:5]))
PY
)
case "$out" in OK*) ok "${out#OK }: m in [P, 8P], 1F1B bubble (P-1)/(m+P-1), runnable flags and commands" ;;
  *) bad "${out#BAD }" ;; esac
# the figures of a PP pick are the engine's: the recommendation says so and names the stage of the peak
if "$PY" -c "
import json, sys
j = json.load(open(sys.argv[1])); r = j['recommended']
sys.exit(0 if r['pp'] > 1 and 'peak_stage' in r and
         'the dry run of each stage (stage %d holds the peak)' % r['peak_stage'] in j['recommendation'] else 1)" \
    "$W/plan.json"; then ok "the PP recommendation says its figures are the engine's dry run of each stage"
else bad "the PP recommendation does not name the engine's stage dry runs: $(grep -o '"recommendation": "[^"]*' "$W/plan.json")"; fi
# the commands: the recommendation and the fastest PP 2 candidate
pick() { # python expression over j -> the candidate
  "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); c=$1; print(c['command'] if c else '')" "$W/plan.json"
}
runcmd() { # label command
  local label=$1 cmd=$2
  case "$cmd" in
    "mpirun -np 4 shardlm train "*"--pp "*) ;;
    *) bad "$label: not a pipeline command: '$cmd'"; return ;;
  esac
  local P m
  P=$(echo "$cmd" | grep -o -- "--pp [0-9]*" | awk '{print $2}')
  m=$(echo "$cmd" | grep -o -- "--grad-accum [0-9]*" | awk '{print $2}')
  # shellcheck disable=SC2086 # the command's words, as a user pastes them
  if timeout 120 $MPI -np 4 "$BIN" ${cmd#mpirun -np 4 shardlm } --steps 2 --threads 1 --out-dir "$W/$label" \
      --plot false --summary false > "$W/$label.log" 2>&1 &&
     grep -q "pipeline: $P ranks x 1 chunk = $P stages, schedule 1f1b, $m micro-batches" "$W/$label.log"; then
    ok "$label runs as printed: $cmd"
  else bad "$label: $cmd"; tail -5 "$W/$label.log"; return; fi
  # shellcheck disable=SC2086
  "$BIN" ${cmd#mpirun -np 4 shardlm } --pp-dry-run --out-dir "$W/$label.dry" > "$W/$label.dry.log" 2>&1
  local line
  line=$(grep -o "^bubble: [0-9]* of [0-9]*" "$W/$label.dry.log")
  if [ -n "$line" ] && "$PY" -c "
import sys; n, d, P, m = map(int, sys.argv[1:]); sys.exit(0 if n * (m + P - 1) == d * (P - 1) else 1)" \
      $(echo "$line" | awk '{print $2, $4}') "$P" "$m"; then
    ok "$label: the schedule's idle share ($line) = (P-1)/(m+P-1), the planner's"
  else bad "$label: dry run '$line' vs (P-1)/(m+P-1) at P $P m $m"; fi
}
# tied embeddings: a pipeline reduces per micro-batch (train refuses --no-sync-accum there)
tiny_model "$W/tied" tied '"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 301,
 "rms_norm_eps": null, "rope_theta": null'
if "$BIN" plan --model "$W/tied/config.json" --gpus 4 --gpu-mem 80G --seq-len 16 --global-batch 256 --dtype fp32 \
    --top 1000 --json > "$W/tied.plan.json" 2> "$W/tied.err" &&
   "$PY" -c "
import json, sys
c = [c for c in json.load(open(sys.argv[1]))['candidates'] if c['pp'] > 1 and c['runnable']]
sys.exit(0 if c and all('--no-sync-accum' not in x['command'] and x['sync_accum'] for x in c) else 1)" "$W/tied.plan.json"
then ok "tied embeddings: no PP command asks for --no-sync-accum"
else bad "tied embeddings: a PP command with --no-sync-accum (or none)"; fi
runcmd recommended "$(pick "j['recommended'] if j['recommended']['pp'] > 1 else None")"
runcmd pp2 "$(pick "next((c for c in j['candidates'] if c['pp'] == 2 and c['runnable'] and c['fits']), None)")"
finish
