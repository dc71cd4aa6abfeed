#!/bin/bash
# tests/cli/reliability/test_harden_count.sh — issue 27 case 4 and the max_position_embeddings
# minor item: the memory pre-check refuses instead of crashing. --seq-len 1e9
# x --micro-batch 1e6 (the count backend's address cursor wrapped, rc 139) is
# refused with exit 2 and the figure; 100,000 and 1,000,000 layers (OOM-killed,
# 23 GB RSS) are refused by the plausibility limit within seconds at small
# RSS; the largest layer count allowed (1024, 70B-wide layers) is checked in
# about a second and ~50 MB; max_position_embeddings 0 is refused naming the
# field; a set max_position_embeddings still bounds --seq-len.
source "${SL_SRC:?}/tests/lib/run.sh" harden_count
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
tiny_data "$W/data"
COMMON="--init random --data $W/data --steps 1 --threads 1 --summary false --plot false --out-dir $W/out"
TIME=""
[ -x /usr/bin/time ] && TIME="/usr/bin/time -f maxrss_kb=%M"
layers() { # DIR N [HIDDEN INTER HEADS KV VOCAB]: tiny_config with N layers, the other sizes as given
  tiny_config "$1" "\"hidden_size\": ${3:-32}, \"intermediate_size\": ${4:-64}, \"num_attention_heads\": ${5:-4},
 \"num_key_value_heads\": ${6:-2}, \"num_hidden_layers\": $2, \"vocab_size\": ${7:-300}"
}
# the binary's own resident size (a CUDA build maps cuBLASLt and the
# runtime, ~200 MB): the RSS bounds below are over this baseline
BASE_KB=0
if [ -n "$TIME" ]; then
  $TIME "$B" train $COMMON --model "$W/no-such-model" > "$W/base.log" 2>&1
  BASE_KB=$(sed -n 's/^maxrss_kb=//p' "$W/base.log" | tail -n 1)
  echo "baseline RSS of a run refused at start-up: ${BASE_KB:-0} kB"
fi
# refused NAME MAXSEC MAXRSS_KB NEEDLE ARGS...: exit 2 within MAXSEC, RSS below BASE + MAXRSS_KB, NEEDLE named
refused() {
  local name=$1 maxs=$2 maxr=$3 needle=$4; shift 4
  local t0=$(date +%s.%N)
  timeout 60 $TIME "$B" train $COMMON "$@" > "$W/$name.log" 2>&1
  local rc=$? dt=$(python3 -c "import time; print('%.2f' % (time.time() - $t0))")
  local rss=$(sed -n 's/^maxrss_kb=//p' "$W/$name.log" | tail -n 1)
  if [ $rc -ne 2 ]; then no "$name: exit $rc, expected 2" "$W/$name.log"; return; fi
  if ! grep -qF -- "$needle" "$W/$name.log"; then no "$name: output does not name '$needle'" "$W/$name.log"; return; fi
  if python3 -c "import sys; sys.exit(0 if $dt > $maxs else 1)"; then no "$name: took $dt s (limit $maxs)"; return; fi
  if [ -n "$rss" ] && [ "$rss" -gt $((maxr + ${BASE_KB:-0})) ]; then
    no "$name: max RSS $rss kB (limit $maxr kB over the ${BASE_KB:-0} kB baseline)"; return; fi
  ok "$name: exit 2 in ${dt}s, max RSS ${rss:-?} kB"
  grep -m1 -F -- "$needle" "$W/$name.log" | cut -c1-220 | sed 's/^/     /'
}
# huge --seq-len x --micro-batch: was a segfault in kernels/count (rc 139)
refused seq_x_batch 15 100000 "1e+15 tokens per micro-batch: the activations alone need more than" \
  --model "$SL_SRC/configs/tiny-llama" --seq-len 1000000000 --micro-batch 1000000 --allow-long-context
refused seq_x_batch_tiny 15 100000 "tokens per micro-batch" \
  --model "$SL_SRC/configs/tiny-llama" --seq-len 1000000000 --micro-batch 1000000000 --allow-long-context
# huge layer counts: the plausibility limit, quick and small
layers "$W/l100k" 100000
layers "$W/l1m" 1000000
refused layers_100k 15 100000 "field 'num_hidden_layers' = 100000 is implausibly large (limit 1024)" \
  --model "$W/l100k" --seq-len 16 --micro-batch 1
refused layers_1m 15 100000 "field 'num_hidden_layers' = 1000000 is implausibly large (limit 1024)" \
  --model "$W/l1m" --seq-len 16 --micro-batch 1
# the largest layer count allowed, 70B-wide layers: the memory check's own
# cost stays bounded (was 0.35 s / 69 MB with a header page per block)
layers "$W/deep" 1024 8192 28672 64 8 128256
refused deep_70b_layers 15 100000 "memory check: this run needs" --model "$W/deep" --seq-len 16 --micro-batch 1
# other plausibility limits name the field, the value and the limit
layers "$W/wide" 1 262144 64 4 2
refused hidden_limit 15 100000 "field 'hidden_size' = 262144 is implausibly large (limit 131072)" \
  --model "$W/wide" --seq-len 16 --micro-batch 1
# max_position_embeddings: 0 refused; a set value bounds --seq-len
tiny_config "$W/mpe0" '"max_position_embeddings": 0'
expect "max_position_embeddings 0" 2 "field 'max_position_embeddings' must be positive, found 0" \
  "$B" train $COMMON --model "$W/mpe0" --seq-len 16 --micro-batch 1
tiny_config "$W/mpe32" '"max_position_embeddings": 32'
expect "--seq-len above max_position_embeddings" 2 "--seq-len 64 is above the model's max_position_embeddings 32" \
  "$B" train $COMMON --model "$W/mpe32" --seq-len 64 --micro-batch 1
expect "--seq-len within max_position_embeddings trains" 0 "" \
  "$B" train $COMMON --model "$W/mpe32" --seq-len 16 --micro-batch 1
# a unit over 2^31 - 1 elements (a Llama-3.1-405B-shaped layer at --tp 1:
# 3,187,703,808): refused at start-up naming the unit and a --tp that fits
# (was: "fsdp: all-gather of unit 1: ... count 3187703808 out of range", exit 1)
# Llama-3.1-405B's published sizes: an input of the test, not a fixture, so inline
mkdir -p "$W/m405"
cat > "$W/m405/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 16384, "intermediate_size": 53248,
 "num_attention_heads": 128, "num_key_value_heads": 8, "num_hidden_layers": 126, "vocab_size": 128256,
 "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072}
J
refused unit_2p31 15 100000 "unit 1 of the model (a decoder layer or the head) holds 3187703808 elements per rank at --tp 1; a collective moves at most 2147483647 (2^31 - 1) elements: use --tp 2" \
  --model "$W/m405" --seq-len 128 --micro-batch 1
finish
