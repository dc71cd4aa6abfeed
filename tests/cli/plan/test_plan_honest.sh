#!/usr/bin/env bash
# shardlm plan says what it did (issue 43, item 9): the printed train
# command takes a --model train accepts (a path to DIR/config.json: DIR;
# another .json file: the placeholder DIR, said so; --init random when the
# directory has no weights) and runs as printed; "nothing fits" with the
# default --host-mem 0 says offload was not searched and what host memory
# it would need (a search with that figure recommends offloading); the
# global batch is met exactly or refused: a --global-batch that is not whole
# sequences is exit 2 naming the nearest two, and every candidate's micro-batch
# x grad-accum x DP x seq-len is the global batch (layouts whose DP degree
# cannot divide it are left out, and the output says which). Before the fix:
# train --model x/config.json (refused by train), a bare "nothing fits",
# and 1M rounded to 30 x 8 x 4096 = 983,040 tokens with exit 0.
source "${SL_SRC:?}/tests/lib/run.sh" plan_honest mpi
F=$SL_SRC/tests/fixtures/hf-configs
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
tiny_data "$W/d" 6000
P=(plan --gpus 2 --gpu-mem 80G --seq-len 16 --global-batch 64 --dtype fp32 --json)
cmd_of() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['recommended']['command'])" "$1"; }
run_cmd() { # label command: the command as printed, 1 step
  # shellcheck disable=SC2086 # the command's words, as a user pastes them
  timeout 120 $MPI -np 2 "$B" ${2#mpirun -np 2 shardlm } --data "$W/d" --steps 1 --threads 1 --out-dir "$W/$1" \
    --plot false --summary false > "$W/$1.log" 2>&1
  rc_is "$1: the printed command runs" $? 0 "$W/$1.log" "trained 1 steps"
}

# a config.json path: train gets its directory (weightless: with --init random)
"$B" "${P[@]}" --model "$W/llama/config.json" > "$W/cfg.json" 2> "$W/cfg.err" || { bad "plan config.json"; cat "$W/cfg.err"; }
c=$(cmd_of "$W/cfg.json")
case "$c" in *"--model $W/llama --init random "*) ok "config.json path -> --model DIR --init random: $c" ;;
  *) bad "command for a config.json path: $c" ;; esac
run_cmd cfg "$c"
# the directory with weights: no --init random, and the command trains from them
"$B" train --model "$W/llama" --init random --data "$W/d" --steps 1 --seq-len 16 --micro-batch 1 --threads 1 \
  --summary false --plot false --out-dir "$W/w" --save "$W/withw" > "$W/w.log" 2>&1 || { bad "weights"; tail -3 "$W/w.log"; }
"$B" "${P[@]}" --model "$W/withw/config.json" > "$W/withw.json" 2>&1
c=$(cmd_of "$W/withw.json")
case "$c" in *"--model $W/withw --seq-len"*) ok "a directory with weights: no --init: $c" ;; *) bad "with weights: $c" ;; esac
run_cmd withw "$c"
grep -q "initialising" "$W/withw.log" && bad "the command did not load the weights" || ok "the command loads the weights"
# another .json name: the placeholder DIR, said so
cp "$W/llama/config.json" "$W/tiny.json"
"$B" plan --gpus 2 --gpu-mem 80G --seq-len 16 --global-batch 64 --dtype fp32 --model "$W/tiny.json" > "$W/tiny.txt" 2>&1
grep -q -- "shardlm train --model DIR --seq-len" "$W/tiny.txt" &&
  grep -qF "(DIR: a model directory holding $W/tiny.json as its config.json" "$W/tiny.txt" &&
  ok "another .json file: --model DIR and what DIR is" || { bad "another .json file"; tail -3 "$W/tiny.txt"; }

# nothing fits at --host-mem 0: offload was not searched, and the figure it would need
"$B" plan --model "$F/Llama-3.1-8B" --gpus 1 --gpu-mem 80G --seq-len 4096 --global-batch 32768 > "$W/nofit.txt" 2>&1
rc_is "nothing fits: says --host-mem is 0" $? 0 "$W/nofit.txt" "Optimizer offload was not searched: --host-mem is 0 (the default)"
need=$(grep -o "at least [0-9]*G" "$W/nofit.txt" | grep -o "[0-9]*G")
"$B" plan --model "$F/Llama-3.1-8B" --gpus 1 --gpu-mem 80G --seq-len 4096 --global-batch 32768 --host-mem "$need" \
  > "$W/fit.txt" 2>&1
grep -q "shardlm train .*--offload-optimizer cpu" "$W/fit.txt" && ok "with --host-mem $need the search offloads and fits" \
  || { bad "--host-mem $need: no offload recommendation"; tail -3 "$W/fit.txt"; }
"$B" plan --model "$F/Llama-3.3-70B-Instruct" --gpus 1 --gpu-mem 80G --seq-len 4096 --global-batch 32768 > "$W/nofit2.txt" 2>&1
grep -q "Optimizer offload was not searched (--host-mem is 0, the default); with it no configuration fits either" \
  "$W/nofit2.txt" && ok "70B on one GPU: offloading would not fit either, and it says so" || { bad "70B no-fit"; tail -2 "$W/nofit2.txt"; }

# the global batch: exact or refused
G8=(plan --model "$F/Llama-3.1-8B" --gpus 8 --gpu-mem 80G --seq-len 4096)
"$B" "${G8[@]}" --global-batch 1M > "$W/1m.txt" 2>&1
rc_is "--global-batch 1M (not whole 4096-token sequences)" $? 2 "$W/1m.txt" "the nearest are 999424 (244 sequences) and 1003520 (245)"
"$B" "${G8[@]}" --global-batch 1.0001K --seq-len 1 > "$W/frac.txt" 2>&1
rc_is "--global-batch 1.0001K (not whole tokens)" $? 2 "$W/frac.txt" "whole number of tokens"
"$B" "${G8[@]}" --global-batch 999424 --no-tp-pp > "$W/none.txt" 2>&1
rc_is "244 sequences over 8 GPUs, FSDP only: no layout meets it" $? 2 "$W/none.txt" "left out: DP 8"
exact() { # JSON, tokens: every candidate's micro x accum x DP x seq = tokens
  "$PY" - "$1" "$2" << 'PY'
import json, sys
j, want = json.load(open(sys.argv[1])), int(sys.argv[2])
c = j["candidates"]
bad = [x["description"] for x in c if x["micro_batch"] * x["grad_accum"] * (j["gpus"] // (x["tp"] * x["pp"])) * 4096 != want]
print(f"{len(c)} candidates, {len(bad)} off: {bad[:2]}")
sys.exit(1 if bad or not c else 0)
PY
}
"$B" "${G8[@]}" --global-batch 999424 --top 0 --json > "$W/244.json" 2> "$W/244.err"
out=$(exact "$W/244.json" 999424) && ok "244 sequences: every candidate trains 999424 tokens a step ($out)" || bad "244: $out"
grep -q "data-parallel degree 8 cannot divide, so those layouts are left out" "$W/244.json" &&
  ok "244 sequences: the recommendation says DP 8 is left out" || bad "no note on the left-out DP degree"
"$B" "${G8[@]}" --global-batch 4194304 --top 0 --json > "$W/4mi.json" 2>&1
out=$(exact "$W/4mi.json" 4194304) && ok "4Mi tokens: every candidate exact ($out)" || bad "4Mi: $out"
grep -q "left out" "$W/4mi.json" && bad "4Mi: a layout left out" || ok "4Mi: no layout left out"
finish
