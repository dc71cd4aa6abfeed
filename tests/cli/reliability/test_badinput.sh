#!/bin/bash
# tests/cli/reliability/test_badinput.sh — bad input files through the CLI: every malformed
# model directory (config.json, safetensors, sharded index) and Megatron
# dataset made by tests/fixtures/make_bad_inputs.py must make
#   shardlm train --model DIR [--init random: DIR without weights] --data PREFIX --steps 1 --micro-batch 1 --seq-len 8
# exit with status 2 and a message naming the bad file, never by a signal;
# the good inputs must train (status 0). Also `shardlm prepare` on a missing
# input exits 2, and on a small text writes exactly the byte-tokenized
# dataset an independent Python tokenizer expects.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC. Exit 77 = skipped.
source "${SL_SRC:?}/tests/lib/run.sh" badinput
CLI=$B
T=$W
if ! "$PY" "$SL_SRC/tests/fixtures/make_bad_inputs.py" "$T/in" > "$T/manifest"; then
  echo "FAIL could not generate fixtures"
  exit 1
fi
# result NAME RC EXPECTED_RC OUTPUT_FILE NEEDLE
result() {
  local name=$1 rc=$2 want=$3 outf=$4 needle=$5 why=""
  if [ "$rc" -eq 124 ]; then why="timed out"
  elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
  elif [ "$rc" -ne "$want" ]; then why="exit status $rc, expected $want"
  elif [ -n "$needle" ] && ! grep -qF -- "$needle" "$outf"; then why="message does not name '$needle'"
  fi
  if [ -z "$why" ]; then
    ok "$name (exit $rc)"
    [ "$want" -ne 0 ] && grep -F -- "${needle:-error}" "$outf" | head -n 1 | sed "s|$T/in/||g; s|^|     |"
  else
    bad "$name: $why"
    tail -n 5 "$outf" | sed "s|^|     |"
  fi
}

k=0
while IFS='|' read -r name want model data needle; do
  [ -z "$name" ] && continue
  k=$((k + 1))
  mkdir -p "$T/run$k"
  init=(--init random) # a directory without weight files: initialised from the seed on purpose
  [ -e "$model/model.safetensors" ] || [ -e "$model/model.safetensors.index.json" ] && init=()
  (cd "$T/run$k" && timeout 300 "$CLI" train --model "$model" "${init[@]}" --data "$data" --steps 1 \
      --micro-batch 1 --seq-len 8) > "$T/out$k" 2>&1
  result "train: $name" $? "$want" "$T/out$k" "$needle"
done < "$T/manifest"

# prepare: missing input -> 2, naming it
(cd "$T" && timeout 60 "$CLI" prepare --input "$T/in/no_such_file.txt" --output "$T/p_missing") > "$T/outp1" 2>&1
result "prepare: missing input" $? 2 "$T/outp1" "no_such_file.txt"

# prepare: a small text, checked against an independent byte tokenizer
printf 'first doc\nline two\n\n\nsecond\r\n\r\nthird \xff\n' > "$T/small.txt"
(cd "$T" && timeout 60 "$CLI" prepare --input "$T/small.txt" --output "$T/p_small") > "$T/outp2" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  "$PY" - "$T/small.txt" "$T/p_small" > "$T/outp3" 2>&1 <<'PYEOF'
import struct, sys
text = open(sys.argv[1], "rb").read()
docs, cur = [], []
for line in text.split(b"\n"):
    if line in (b"", b"\r"):
        if cur: docs.append(b"\n".join(cur)); cur = []
    else:
        cur.append(line)
if cur: docs.append(b"\n".join(cur))
want = [list(d) + [256] for d in docs]
idx = open(sys.argv[2] + ".idx", "rb").read()
b = open(sys.argv[2] + ".bin", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
ver, dt, ns, nd = struct.unpack_from("<QBQQ", idx, 9)
assert (ver, dt) == (1, 8), (ver, dt)
sizes = struct.unpack_from("<%di" % ns, idx, 34)
ptrs = struct.unpack_from("<%dq" % ns, idx, 34 + 4 * ns)
doc = struct.unpack_from("<%dq" % nd, idx, 34 + 12 * ns)
assert len(idx) == 34 + 12 * ns + 8 * nd
got = [list(struct.unpack_from("<%dH" % s, b, p)) for s, p in zip(sizes, ptrs)]
assert got == want, (got, want)
assert doc[0] == 0 and doc[-1] == ns and nd == len(want) + 1, doc
print("prepare output matches the reference tokenizer: %d documents" % len(want))
PYEOF
  rc=$?
  cat "$T/outp3" >> "$T/outp2"
fi
result "prepare: small text equals the reference byte tokenizer" $rc 0 "$T/outp2" ""

finish
