#!/usr/bin/env bash
# --init hf|random (issue 43, item 8): a --model directory without weight
# files is refused (exit 2, naming the directory and --init random) instead
# of training from a random initialisation, on one rank and on two; --init
# random initialises from --seed on purpose (and says so, after the resume
# decision), also over a directory that has weights; --resume with a
# checkpoint needs no weights; the built-in model is random; eval and
# generate refuse a directory without weights. Before the fix the weightless
# directory trained with exit 0.
source "${SL_SRC:?}/tests/lib/run.sh" init mpi
tiny_model "$W/m" llama '"num_hidden_layers": 1'
tiny_data "$W/d" 6000
T=(train --data "$W/d" --data-order sequential --steps 2 --seq-len 8 --micro-batch 2 --threads 1 --summary false
  --plot false --log-every 1)
first_loss() { "$PY" -c "import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())['loss']))" "$1/metrics.jsonl"; }

"$B" "${T[@]}" --model "$W/m" --out-dir "$W/r1" > "$W/r1.log" 2>&1
rc_is "no weights, no --init: refused" $? 2 "$W/r1.log" "--model $W/m has no weight files"
grep -qF -- "--init random" "$W/r1.log" && ok "the refusal names --init random" || bad "no --init random in the refusal"
[ ! -e "$W/r1/metrics.jsonl" ] && ok "nothing trained" || bad "a metrics file was written"
$MPI -np 2 "$B" "${T[@]}" --model "$W/m" --out-dir "$W/r2" > "$W/r2.log" 2>&1
rc_is "no weights, 2 ranks: refused" $? 2 "$W/r2.log" "has no weight files"
echo '{"init": "random"}' > "$W/init.json"
"$B" "${T[@]}" --model "$W/m" --config "$W/init.json" --out-dir "$W/rand" --save "$W/saved" > "$W/rand.log" 2>&1
rc_is "--init random (a --config key): trains from the seed, says so" $? 0 "$W/rand.log" \
  "--init random: initialising from seed 1234 ($W/m has no weight files)"
"$B" "${T[@]}" --model "$W/m" --init bogus > "$W/bogus.log" 2>&1
rc_is "--init bogus" $? 2 "$W/bogus.log" "--init must be hf or random, found 'bogus'"

# a directory with weights: hf loads them, random ignores them (and says so)
"$B" "${T[@]}" --model "$W/saved" --out-dir "$W/hf" > "$W/hf.log" 2>&1
rc_is "weights, default --init hf: loads them" $? 0 "$W/hf.log"
grep -q "initialising" "$W/hf.log" && bad "an init line for a run that loaded weights" || ok "no init line when the weights load"
"$B" "${T[@]}" --model "$W/saved" --init random --out-dir "$W/hfr" > "$W/hfr.log" 2>&1
rc_is "weights and --init random: from the seed, the weights not loaded" $? 0 "$W/hfr.log" \
  "the weights in $W/saved are not loaded"
a=$(first_loss "$W/rand") b=$(first_loss "$W/hfr") c=$(first_loss "$W/hf")
[ "$a" = "$b" ] && ok "--init random over weights = --init random without ($a)" || bad "random over weights $b vs $a"
[ "$a" != "$c" ] && ok "the loaded weights give another first loss ($c)" || bad "hf and random give the same loss $a"

# --resume: the checkpoint has the weights; the seed's line (none here) comes after the resume decision
"$B" "${T[@]}" --model "$W/m" --init random --ckpt-dir "$W/ck" --out-dir "$W/ck1" > "$W/ck1.log" 2>&1
rc_is "--init random with checkpoints" $? 0 "$W/ck1.log"
"$B" "${T[@]}" --model "$W/m" --steps 3 --resume --ckpt-dir "$W/ck" --out-dir "$W/ck1" > "$W/ck2.log" 2>&1
rc_is "no weights, --resume with a checkpoint: resumes" $? 0 "$W/ck2.log" "resumed from $W/ck at step 2"
grep -q "initialising" "$W/ck2.log" && bad "an init line in a resumed run: $(grep initialising "$W/ck2.log")" \
  || ok "no init line in the resumed run"
"$B" "${T[@]}" --model "$W/m" --resume --ckpt-dir "$W/empty" --out-dir "$W/ck3" > "$W/ck3.log" 2>&1
rc_is "no weights, --resume without a checkpoint: refused" $? 2 "$W/ck3.log" "--resume found no checkpoint"
"$B" "${T[@]}" --model "$W/m" --init random --resume --ckpt-dir "$W/empty2" --out-dir "$W/ck4" > "$W/ck4.log" 2>&1
rc_is "--init random, --resume without a checkpoint: from the seed" $? 0 "$W/ck4.log" "no checkpoint in $W/empty2"
if [ "$(grep -n "no checkpoint in" "$W/ck4.log" | cut -d: -f1)" -lt "$(grep -n "initialising from seed" "$W/ck4.log" | cut -d: -f1)" ]; then
  ok "the init line follows the resume decision"
else bad "the init line comes before the resume decision"; grep -n "checkpoint\|initialising" "$W/ck4.log"; fi

# the built-in model: random, no flag needed
"$B" train --steps 1 --seq-len 8 --micro-batch 1 --threads 1 --summary false --plot false --out-dir "$W/bi" > "$W/bi.log" 2>&1
rc_is "the built-in model (no --model)" $? 0 "$W/bi.log" "initialising the built-in model from seed 1234"

# eval and generate: no weights, no evaluation
"$B" eval --model "$W/m" --data "$W/d" --seq-len 8 --max-samples 2 > "$W/ev.log" 2>&1
rc_is "eval of a directory without weights" $? 2 "$W/ev.log" "no *.safetensors weights"
"$B" eval --model "$W/saved" --data "$W/d" --seq-len 8 --max-samples 2 --init random > "$W/ev2.log" 2>&1
rc_is "eval --init random" $? 2 "$W/ev2.log" "nothing to initialise"
"$B" generate --model "$W/m" --prompt-ids 1,2 --print-ids > "$W/gen.log" 2>&1
rc_is "generate from a directory without weights" $? 2 "$W/gen.log" "no *.safetensors weights"
finish
