#!/bin/bash
# tests/cli/reliability/test_harden_check_mem.sh — issue 11 case 9: the memory check before
# allocating. A 70B-class config.json and --micro-batch 2000000 on a tiny
# model must be refused with exit 2 within seconds, without a big allocation
# (max RSS stays small), naming the figure, the limit and a `shardlm plan`
# command; that plan command must run; the 70B refusal's figure must match
# the planner's engine check; a normal run must still pass.
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_mem
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
tiny_config "$W/tiny" '"rope_theta": 10000.0'
# Llama-3-70B's published sizes: an input of the test, not a fixture, so inline
mkdir -p "$W/big"
cat > "$W/big/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
 "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
 "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192}
J
tiny_data "$W/data"
COMMON="--init random --data $W/data --steps 1 --seq-len 16 --threads 1 --summary false --plot false --out-dir $W/out"
TIME=""
[ -x /usr/bin/time ] && TIME="/usr/bin/time -f maxrss_kb=%M"
refused() { # NAME ARGS...: exit 2, fast, small RSS, message with the figure, limit, plan command
  local name=$1; shift
  local t0=$SECONDS
  timeout 60 $TIME "$B" train $COMMON "$@" > "$W/$name.log" 2>&1
  local rc=$? dt=$((SECONDS - t0))
  local rss=$(sed -n 's/^maxrss_kb=//p' "$W/$name.log" | tail -n 1)
  if [ $rc -ne 2 ]; then no "$name: exit $rc, expected 2" "$W/$name.log"; return; fi
  if ! grep -q "memory check: this run needs .* GiB .* but only .* GiB is available" "$W/$name.log" ||
     ! grep -qF "shardlm plan --model" "$W/$name.log" || ! grep -qF -- "--skip-memory-check" "$W/$name.log"; then
    no "$name: message lacks the figure, limit or plan command" "$W/$name.log"; return; fi
  if [ $dt -gt 20 ]; then no "$name: took $dt s"; return; fi
  if [ -n "$rss" ] && [ "$rss" -gt 300000 ]; then no "$name: max RSS $rss kB before refusing"; return; fi
  ok "$name refused in ${dt}s, max RSS ${rss:-?} kB"
  grep -m1 "memory check" "$W/$name.log" | cut -c1-220 | sed 's/^/     /'
}
refused big70b --model "$W/big" --micro-batch 1
refused microbatch --model "$W/tiny" --micro-batch 2000000
# the suggested plan command runs (exit 0)
cmd=$(grep -o "shardlm plan --model [^(]*" "$W/big70b.log" | head -n 1)
if [ -n "$cmd" ] && timeout 120 "$B" ${cmd#shardlm } > "$W/plan.log" 2>&1; then ok "suggested plan command runs"
else no "suggested plan command '$cmd' failed" "$W/plan.log"; fi
# the figure is the planner's engine-check total (+ the unit load buffer, < 10%)
need=$(grep -o "needs [0-9.]* GiB" "$W/big70b.log" | head -n 1 | awk '{print $2}')
peak=$("$B" plan --engine-check --model "$W/big" --world 1 --zero 3 --micro-batch 1 --seq-len 16 --grad-accum 1 --json |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"] / 2**30)')
if python3 -c "import sys; n,p=float('$need'),float('$peak'); sys.exit(0 if p <= n <= 1.1*p else 1)" 2>/dev/null; then
  ok "figure $need GiB matches the engine check $peak GiB"
else no "figure '$need' GiB vs engine check '$peak' GiB"; fi
# under --pp the figure is the fullest stage's: the largest per-stage peak
# of the planner's engine check per pipeline stage (plan --engine-check --pp)
if command -v mpirun > /dev/null; then
  timeout 120 $MPI -np 2 "$B" train $COMMON --model "$W/big" \
    --micro-batch 1 --grad-accum 2 --pp 2 > "$W/pp.log" 2>&1
  rc=$?
  need=$(grep -o "needs [0-9.]* GiB" "$W/pp.log" | head -n 1 | awk '{print $2}')
  peak=$("$B" plan --engine-check --model "$W/big" --world 2 --pp 2 --zero 3 --micro-batch 1 --seq-len 16 \
         --grad-accum 2 --json | python3 -c 'import json,sys; print(max(s["peak_bytes"] for s in json.load(sys.stdin)["stages"]) / 2**30)')
  if [ $rc -eq 2 ] && python3 -c "import sys; n,p=float('$need'),float('$peak'); sys.exit(0 if p <= n <= 1.1*p else 1)" 2>/dev/null; then
    ok "--pp 2: refused with the fullest stage's $need GiB (engine check per stage: $peak GiB)"
  else no "--pp 2: exit $rc, figure '$need' GiB vs the fullest stage's '$peak' GiB" "$W/pp.log"; fi
  # the suggested plan's --global-batch is the run's: micro-batch 1 x accumulation 2 x 1 data-parallel rank
  # (2 ranks, both pipeline stages) x 16 tokens = 32 (it counted the pipeline ranks as data-parallel: 64)
  if grep -qF -- "--global-batch 32 " "$W/pp.log"; then ok "--pp 2: the suggested --global-batch counts DP ranks only"
  else no "--pp 2: suggested --global-batch is not 32 tokens" "$W/pp.log"; fi
fi
# a run that fits trains
if timeout 120 "$B" train $COMMON --model "$W/tiny" --micro-batch 2 > "$W/fit.log" 2>&1; then ok "fitting run trains"
else no "fitting run failed" "$W/fit.log"; fi
# --skip-memory-check is accepted (small run)
if timeout 120 "$B" train $COMMON --model "$W/tiny" --micro-batch 2 --skip-memory-check > "$W/skip.log" 2>&1; then
  ok "--skip-memory-check accepted"; else no "--skip-memory-check run failed" "$W/skip.log"; fi
finish
