#!/usr/bin/env bash
# Run directories (issue 41 item 1): each run writes into its own
# runs/<date-time> (or runs/NAME with --run-name), runs/latest names the
# newest, the resolved settings are written there as run.json as the run
# starts (every setting after defaults, the build, the model's config hash),
# run.json given back to --config trains the same run, and a resumed run
# appends to its own run's metrics. Checks through the binary, in a fresh
# working directory.
source "${SL_SRC:?}/tests/lib/run.sh" run_dirs mpi
tiny_model "$W/m" llama
tiny_data "$W/data" 20000
cd "$W" || exit 1
T="--model $W/m --data $W/data --seq-len 16 --micro-batch 2 --threads 1 --summary false --plot false --init random"
"$B" train $T --steps 4 > a.log 2>&1 || bad "first run"
sleep 1.1
"$B" train $T --steps 2 > b.log 2>&1 || bad "second run"
n=$(ls -d runs/2* 2> /dev/null | wc -l)
[ "$n" = 2 ] && ok "two runs with the default output: two run directories ($(ls runs | tr '\n' ' '))" ||
  bad "expected 2 run directories, found $n: $(ls runs)"
first=$(ls -d runs/2* | head -1) second=$(ls -d runs/2* | tail -1)
[ "$(wc -l < "$first/metrics.jsonl")" -ge 4 ] && [ "$(wc -l < "$second/metrics.jsonl")" -ge 2 ] &&
  ok "both metrics files kept ($(wc -l < "$first/metrics.jsonl") and $(wc -l < "$second/metrics.jsonl") lines)" ||
  bad "a metrics file was lost"
[ -L runs/latest ] && [ "$(readlink runs/latest)" = "$(basename "$second")" ] &&
  ok "runs/latest -> $(readlink runs/latest), the second run" || bad "runs/latest is $(readlink runs/latest)"
grep -q "^run:     $second " b.log && ok "the run says where its directory is: $(grep '^run:' b.log)" ||
  bad "no 'run:' line naming $second"

# a run that starts its own ranks (--nproc 2: mpirun) names its directory once, and rank 0 points runs/latest at it
"$B" train $T --steps 1 --nproc 2 --run-name two > two.log 2>&1 || bad "--nproc 2 run: $(tail -2 two.log)"
[ "$(readlink runs/latest)" = two ] && [ -s runs/two/metrics.jsonl ] && [ -s runs/two/run.json ] &&
  ok "--nproc 2: runs/two with its metrics and run.json, runs/latest -> two" || bad "--nproc 2: runs/latest -> $(readlink runs/latest)"

# run.json: every setting, the build and the model's hash; --config reads it back to the same run
"$PY" - "$first/run.json" << 'P' && ok "run.json holds every setting, the build and the model's config hash" || bad "run.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["steps"] == 4 and j["seq-len"] == 16 and j["lr"] == 3e-3 and j["zero"] == 3, j
assert j["_shardlm"].startswith("shardlm ") and len(j["_model_config_hash"]) == 16, j
P
"$B" train --config "$first/run.json" --out-dir again > c.log 2>&1 || bad "train --config run.json: $(tail -2 c.log)"
cut -d, -f1-3 "$first/metrics.jsonl" | grep '"loss"' > l1.txt
cut -d, -f1-3 again/metrics.jsonl | grep '"loss"' > l2.txt
[ -s l1.txt ] && cmp -s l1.txt l2.txt && ok "train --config run.json repeats the run (same losses, $(wc -l < l1.txt) steps)" ||
  bad "run.json's run differs: $(diff l1.txt l2.txt | head -3)"

# --run-name
"$B" train $T --steps 1 --run-name mine > d.log 2>&1 && [ -s runs/mine/metrics.jsonl ] &&
  [ "$(readlink runs/latest)" = mine ] && ok "--run-name mine writes runs/mine (runs/latest -> mine)" || bad "--run-name"
"$B" train $T --steps 1 --run-name a/b > e.log 2>&1
rc_is "--run-name with a '/' refused" $? 2 e.log "--run-name"

# a resumed run appends to its own run's files, wherever runs/latest points now
"$B" train $T --steps 6 --ckpt-dir ck --ckpt-every 3 --run-name res --on-nonfinite stop > f.log 2>&1 || bad "run res"
head -3 runs/res/metrics.jsonl | grep '"loss"' > res-head.txt
rm -rf ck/step-000006
"$B" train $T --steps 2 --run-name other > g.log 2>&1
"$B" train $T --steps 6 --ckpt-dir ck --ckpt-every 3 --resume > h.log 2>&1 || bad "resume: $(tail -2 h.log)"
grep -q "^run:     .*runs/res " h.log && ok "the resumed run wrote into its own run directory ($(grep '^run:' h.log | cut -c1-80))" ||
  bad "resumed into $(grep '^run:' h.log)"
steps=$(grep -c '"loss"' runs/res/metrics.jsonl)
[ "$steps" = 6 ] && head -3 runs/res/metrics.jsonl | grep '"loss"' | cmp -s - res-head.txt &&
  ok "runs/res/metrics.jsonl: steps 1-3 kept, 4-6 appended (6 steps)" || bad "runs/res/metrics.jsonl has $steps steps"
[ ! -e runs/other/run-dir ] && [ -d runs/other ] && ok "the other run's directory untouched" || bad "runs/other"
finish
