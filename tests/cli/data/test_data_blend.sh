#!/usr/bin/env bash
# Dataset blends (--data "W1 PREFIX1 W2 PREFIX2"), loss-mask files and the
# refusals around them, through the CLI:
#  - proportions: dataset A (loss mask all 1) and B (all 0) blended 0.7/0.3:
#    the metrics' loss_tokens count A's samples; over 100 samples the share
#    is 0.70 within 0.02 and every step counts whole samples;
#  - deterministic: the same run twice gives bit-identical losses; "1 A"
#    trains bit-identically to plain "A";
#  - resume exact: a blended, shuffled 2-rank ZeRO-3 run killed after its
#    step-6 checkpoint and resumed equals the uninterrupted run bit for bit
#    (losses and final weights);
#  - a step whose targets are all masked has loss 0, grad_norm 0;
#  - bad blends, bad .lmask files (magic, token count, size, byte values),
#    --eod-id outside the vocabulary: exit 2 (Mamba with --doc-attention-mask runs)
#    with a message naming the file / flag; a large vocabulary without
#    --eod-id trains (the documents are the .idx's).
source "${SL_SRC:?}/tests/lib/run.sh" data_blend numpy mpi
tiny_model "$W/llama" llama '"num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1'
tiny_model "$W/big" llama '"num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 600'
tiny_model "$W/mamba" mamba '"num_hidden_layers": 1'
"$PY" - "$W" "$SL_SRC" <<'PY' || { echo "FAIL could not write the datasets"; exit 1; }
import sys
import numpy as np
w, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, src + "/tests/ref"); sys.path.insert(0, src + "/tests/lib")
import common
from lmask import write_lmask
rng = np.random.RandomState(5)
for name, lo, hi, n, m in (("A", 0, 50, 900, 1), ("B", 50, 100, 500, 0), ("Z", 0, 100, 300, 0)):
    docs = [rng.randint(lo, hi, k) for k in np.diff(np.linspace(0, n, 8).astype(int))]
    common.idx_write(f"{w}/{name}", docs)
    write_lmask(f"{w}/{name}", np.full(n, m))
    if name == "A":  # the same tokens without a mask, and bad masks beside copies
        for bad in ("magic", "count", "short", "byte"):
            common.idx_write(f"{w}/bad_{bad}", docs)
        write_lmask(f"{w}/bad_magic", np.ones(n), magic=b"SLLMASK2")
        write_lmask(f"{w}/bad_count", np.ones(n), n=n + 1)
        write_lmask(f"{w}/bad_short", np.ones(n - 3), n=n)
        mm = np.ones(n); mm[417] = 2
        write_lmask(f"{w}/bad_byte", mm)
PY
COMMON="--model $W/llama --init random --seq-len 16 --micro-batch 4 --threads 1 --summary false --plot false --lr 1e-3 --warmup 2"
train() { # name [args...]: output in $W/name/, metrics $W/name/metrics.jsonl
  local n=$1; shift
  "$B" train $COMMON --out-dir "$W/$n" --save "$W/$n/model" "$@" > "$W/$n.log" 2>&1
}
losses() { "$PY" -c "import json,sys; print(' '.join(repr(float(json.loads(l)[sys.argv[2]])) for l in open(sys.argv[1])))" "$@"; }

# ---- proportions
if train p1 --data "0.7 $W/A 0.3 $W/B" --steps 25; then
  if "$PY" - "$W/p1/metrics.jsonl" <<'PY'; then ok "blend 0.7/0.3: share of A within 0.02 of 0.7, whole samples per step"; else bad "blend proportions"; fi
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tok = [r["loss_tokens"] for r in rows]
na = sum(tok) // 16
share = na / (4 * len(rows))
print(f"     samples of A: {na} of {4 * len(rows)} (share {share:.3f}); per-step counted targets {tok}")
sys.exit(0 if abs(share - 0.7) <= 0.02 and all(t % 16 == 0 for t in tok) else 1)
PY
else bad "blend run (exit $?)"; tail -3 "$W/p1.log"; fi
# ---- determinism
train p2 --data "0.7 $W/A 0.3 $W/B" --steps 25 || bad "second blend run"
if [ -f "$W/p2/metrics.jsonl" ] && [ "$(losses "$W/p1/metrics.jsonl" loss)" = "$(losses "$W/p2/metrics.jsonl" loss)" ] &&
   cmp -s "$W/p1/model/model.safetensors" "$W/p2/model/model.safetensors"; then
  ok "blend deterministic: two runs bit-identical"
else bad "blend runs differ"; fi
train s1 --data "$W/A" --steps 6 && train s2 --data "1 $W/A" --steps 6 || bad "single-dataset runs"
if [ "$(losses "$W/s1/metrics.jsonl" loss)" = "$(losses "$W/s2/metrics.jsonl" loss)" ]; then
  ok "\"1 PREFIX\" trains bit-identically to \"PREFIX\""
else bad "\"1 PREFIX\" differs from \"PREFIX\""; fi
train s3 --data "0.5 $W/A 0.5 $W/B" --steps 6 --seed 7 || bad "seed run"
if [ "$(losses "$W/s3/metrics.jsonl" loss)" != "$(losses "$W/s1/metrics.jsonl" loss)" ]; then ok "another blend trains differently"
else bad "another blend gave the same losses"; fi

# ---- resume exact (2 ranks, ZeRO-3, shuffled blend)
R="$MPI -np 2 $B train $COMMON --micro-batch 2 --zero 3 --data-order shuffled --steps 12"
D="0.6 $W/A 0.4 $W/B"
$R --data "$D" --out-dir "$W/ra" --save "$W/ra/model" > "$W/ra.log" 2>&1 || bad "straight 2-rank run"
SL_CKPT_FAULT=after-latest SL_CKPT_FAULT_STEP=6 SL_CKPT_FAULT_RANK=0 \
  $R --data "$D" --out-dir "$W/rb" --ckpt-dir "$W/ck" --ckpt-every 3 --metrics "$W/rb1.jsonl" > "$W/rb1.log" 2>&1
$R --data "$D" --out-dir "$W/rb" --ckpt-dir "$W/ck" --ckpt-every 3 --resume --metrics "$W/rb2.jsonl" \
  --save "$W/rb/model" > "$W/rb2.log" 2>&1 || bad "resumed run"
if grep -q "resumed from .* at step 6" "$W/rb2.log" &&
   "$PY" - "$W/ra/metrics.jsonl" "$W/rb1.jsonl" "$W/rb2.jsonl" <<'PY' && cmp -s "$W/ra/model/model.safetensors" "$W/rb/model/model.safetensors"; then
import json, sys
a, b1, b2 = ({j["step"]: (j["loss"], j["loss_tokens"]) for j in map(json.loads, open(p))} for p in sys.argv[1:])
# (the kill comes after the step-6 checkpoint, whose metrics line is written before it)
assert sorted(b1) == list(range(1, 7)) and sorted(b2) == list(range(7, 13)), (sorted(b1), sorted(b2))
sys.exit(0 if all(a[s] == v for part in (b1, b2) for s, v in part.items()) else 1)
PY
  ok "blend resume: killed after step 6, resumed: losses and final weights bit-identical"
else bad "blend resume not exact"; tail -3 "$W/rb2.log"; fi

# ---- all targets masked
if train z1 --data "$W/Z" --steps 2 && [ "$(losses "$W/z1/metrics.jsonl" loss)" = "0.0 0.0" ] &&
   [ "$(losses "$W/z1/metrics.jsonl" grad_norm)" = "0.0 0.0" ] && [ "$(losses "$W/z1/metrics.jsonl" loss_tokens)" = "0.0 0.0" ]; then
  ok "every target masked: loss 0, grad_norm 0, loss_tokens 0"
else bad "all-masked step"; fi

# ---- refusals (exit 2, message names the file / flag)
refuse() { # name needle args...
  local n=$1 needle=$2; shift 2
  "$B" train $COMMON --steps 1 --out-dir "$W/x" "$@" > "$W/x.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/x.log"; then ok "$n refused (exit 2): $(grep -F -- "$needle" "$W/x.log" | head -1 | sed "s|$W/||g")"
  else bad "$n: exit $rc, expected 2 naming '$needle'"; tail -2 "$W/x.log"; fi
}
refuse "blend with an odd word count" "--data" --data "0.5 $W/A 0.5"
refuse "blend with a negative weight" "--data" --data "-1 $W/A 2 $W/B"
refuse "blend with a non-numeric weight" "--data" --data "x $W/A 1 $W/B"
refuse "blend with a missing prefix" "$W/nope.idx" --data "0.5 $W/A 0.5 $W/nope"
for k in magic count short byte; do refuse ".lmask bad $k" "$W/bad_$k.lmask" --data "$W/bad_$k"; done
# Mamba restarts its conv and scan at each document (tests/ref/mamba2_checks.py: a packed row = its documents)
train mambadoc --model "$W/mamba" --data "$W/A" --doc-attention-mask true --steps 1 &&
  ok "--doc-attention-mask on Mamba: runs (its state restarts per document)" ||
  bad "--doc-attention-mask on Mamba: $(tail -2 "$W/mambadoc.log")"
refuse "--eod-id outside the vocabulary" "--eod-id" --data "$W/A" --doc-attention-mask true --eod-id 300
# the documents come from the .idx: a large vocabulary needs no --eod-id
train big --model "$W/big" --data "$W/A" --doc-attention-mask true --steps 1 && ok "--doc-attention-mask, vocab 600, no --eod-id: runs" ||
  bad "--doc-attention-mask without --eod-id on vocab 600: $(tail -2 "$W/big.log")"
finish
