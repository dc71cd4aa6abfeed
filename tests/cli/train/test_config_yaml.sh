#!/usr/bin/env bash
# Config files in YAML (issue 41 item 5): --config FILE.yaml gives the same
# run as the same flags (the metrics' losses line for line); an unknown key,
# a nested value or a second document is refused naming the file, its line
# and the key (exit 2); --print-config prints the resolved settings in the
# --config file's format (YAML for a .yaml, JSON otherwise), and that output
# given back to --config repeats the run.
source "${SL_SRC:?}/tests/lib/run.sh" config_yaml
tiny_model "$W/m" llama
tiny_data "$W/data" 20000
cd "$W" || exit 1
FLAGS="--model $W/m --data $W/data --seq-len 16 --micro-batch 2 --steps 3 --lr 2e-3 --warmup 1 --zero 2 --threads 1
  --summary false --plot false"
"$B" train $FLAGS --init random --out-dir flags > flags.log 2>&1 || bad "the run with flags: $(tail -2 flags.log)"
cat > run.yaml << Y
# the same settings as FLAGS, in YAML (comments allowed)
model: $W/m
data: "$W/data"
seq-len: 16
micro-batch: 2
steps: 3
lr: 2e-3
warmup: 1
zero: 2
threads: 1
summary: false
plot: false
Y
echo "init: random" >> run.yaml
"$B" train --config run.yaml --out-dir yaml > yaml.log 2>&1 || bad "the run with run.yaml: $(tail -2 yaml.log)"
# the metrics lines without their clock readings (tokens/s, MFU, times, ETA): every other field, line for line
loss() {
  "$PY" -c '
import json, sys
clock = {"tokens_per_s", "mfu", "step_time_s", "comm_wait_s", "elapsed_s", "eta_s", "tokens_per_s_avg", "mfu_avg"}
for l in open(sys.argv[1]):
    j = json.loads(l)
    print(json.dumps({k: v for k, v in j.items() if k not in clock}, sort_keys=True))' "$1/metrics.jsonl"
}
[ -s flags/metrics.jsonl ] && [ "$(loss flags)" = "$(loss yaml)" ] &&
  ok "--config run.yaml = the same flags ($(loss yaml | wc -l) metrics lines, every field but the clock's)" ||
  bad "YAML and flags differ: $(diff <(loss flags) <(loss yaml) | head -3)"

printf 'steps: 3\nlearning-rate: 1e-3\n' > bad1.yaml
"$B" train --config bad1.yaml > bad1.log 2>&1
rc_is "an unknown key refused with its line" $? 2 bad1.log "bad1.yaml:2: unknown setting 'learning-rate'"
printf 'steps: 3\nlr:\n  peak: 1e-3\n' > bad2.yaml
"$B" train --config bad2.yaml > bad2.log 2>&1
rc_is "a mapping as a value refused" $? 2 bad2.log "bad2.yaml:3: setting 'lr' must be a single value"
printf 'steps: [1, 2]\n' > bad3.yaml
"$B" train --config bad3.yaml > bad3.log 2>&1
rc_is "a list as a value refused" $? 2 bad3.log "bad3.yaml:1: setting 'steps' must be a single value"
printf 'steps: three\n' > bad4.yaml
"$B" train --config bad4.yaml > bad4.log 2>&1
rc_is "a value of the wrong type refused with its line" $? 2 bad4.log "bad4.yaml:1"
printf 'steps: 3\nlr: "unclosed\n' > bad5.yaml
"$B" train --config bad5.yaml > bad5.log 2>&1
rc_is "malformed YAML refused with its line" $? 2 bad5.log "bad5.yaml:"

"$B" train --config run.yaml --out-dir printed --print-config > printed.yaml 2> p.err
[ $? = 0 ] && grep -q '^steps: 3$' printed.yaml && grep -q '^lr: 0.002$' printed.yaml &&
  ok "--print-config prints YAML for a .yaml config ($(wc -l < printed.yaml) settings)" || bad "--print-config: $(head -3 printed.yaml) $(cat p.err)"
"$B" train --config printed.yaml > printed.log 2>&1 || bad "the printed YAML as --config: $(tail -2 printed.log)"
[ "$(loss flags)" = "$(loss printed)" ] && ok "the printed settings given back to --config repeat the run" ||
  bad "the printed settings' run differs"
"$B" train $FLAGS --print-config > printed.json 2> /dev/null
"$PY" -c "import json,sys; j=json.load(open('printed.json')); assert j['steps']==3 and j['zero']==2" &&
  ok "--print-config prints JSON without a YAML config" || bad "--print-config JSON"
finish
