#!/usr/bin/env bash
# shardlm prepare refuses broken input (issue 27, case 3 and two minor items):
# truncated / corrupt / wrong-magic .gz and .zst (exit 2, "FILE: truncated gzip
# stream at byte N", no output files), a good file of each still works; an
# --output prefix ending in '/'; a BPE tokenizer without byte fallback or unk
# token: dropped characters are counted and warned about, --strict refuses;
# duplicate vocabulary ids and duplicate JSON keys in tokenizer.json.
source "${SL_SRC:?}/tests/lib/run.sh" harden_prepare
command -v gzip > /dev/null || skip "gzip is not installed"
# refused NAME NEEDLE ARGS...: exit 2, NEEDLE in stderr, no output at $W/o*
refused() {
  local n=$1 needle=$2
  shift 2
  rm -f "$W"/o.*
  "$B" prepare --quiet --output "$W/o" "$@" > "$W/log" 2>&1
  local rc=$?
  if [ $rc -ne 2 ]; then bad "$n: exit $rc, expected 2"; tail -n 3 "$W/log"; return; fi
  if ! grep -qF -- "$needle" "$W/log"; then bad "$n: no '$needle' in: $(cat "$W/log")"; return; fi
  if ls "$W"/o.* > /dev/null 2>&1; then bad "$n: output left behind: $(ls "$W"/o.*)"; return; fi
  ok "$n: $(head -c 160 "$W/log")"
}
# accepted NAME ARGS...: exit 0, same tokens as the plain text (o.bin vs $W/ref.bin)
accepted() {
  local n=$1
  shift
  rm -f "$W"/o.*
  if "$B" prepare --quiet --output "$W/o" "$@" > "$W/log" 2>&1 && cmp -s "$W/o.bin" "$W/ref.bin" && cmp -s "$W/o.idx" "$W/ref.idx"; then
    ok "$n"
  else bad "$n: $(cat "$W/log")"; fi
}
$PY - "$W" <<'P'
import json, random, sys
W = sys.argv[1]
random.seed(3)
with open(W + "/c.txt", "w") as f:
    for i in range(4000):
        f.write(" ".join(str(random.random()) for _ in range(12)) + ("\n\n" if i % 3 == 2 else "\n"))
P
"$B" prepare --quiet --input "$W/c.txt" --output "$W/ref" || { echo "FAIL reference prepare"; exit 1; }
gzip -c "$W/c.txt" > "$W/c.txt.gz"
# cut NAME SRC: the first half of SRC; flip NAME SRC: 64 bytes in the middle xor 0x5a
cut() { head -c $(($(stat -c%s "$2") / 2)) "$2" > "$W/$1"; }
flip() { $PY -c '
import sys
b = bytearray(open(sys.argv[1], "rb").read()); n = len(b) // 2
for i in range(n, n + 64): b[i] ^= 0x5a
open(sys.argv[2], "wb").write(b)' "$2" "$W/$1"; }
accepted "good .gz" --input "$W/c.txt.gz"
cut h.txt.gz "$W/c.txt.gz"
refused "half a .gz" "h.txt.gz: truncated gzip stream at byte $(stat -c%s "$W/h.txt.gz")" --input "$W/h.txt.gz"
flip m.txt.gz "$W/c.txt.gz"
refused "corrupt .gz" "m.txt.gz: corrupt gzip stream at byte" --input "$W/m.txt.gz"
cp "$W/c.txt" "$W/x.txt.gz"
refused "plain text named .gz" "x.txt.gz: not a gzip file: it starts with the bytes" --input "$W/x.txt.gz"
: > "$W/e.txt.gz"
refused "empty .gz" "e.txt.gz: not a gzip file: it is empty" --input "$W/e.txt.gz"
{ cat "$W/c.txt.gz"; echo junk; } > "$W/t.txt.gz"
refused ".gz with trailing data" "t.txt.gz: corrupt gzip stream at byte $(stat -c%s "$W/c.txt.gz")" --input "$W/t.txt.gz"
{ head -c 100000 "$W/c.txt" | gzip; tail -c +100001 "$W/c.txt" | gzip; } > "$W/mm.txt.gz"
accepted "two-member .gz" --input "$W/mm.txt.gz"
# a .jsonl.gz cut: the rows decoded before the cut must not be written either
$PY -c 'import json,sys; [print(json.dumps({"text": l.strip()})) for l in open(sys.argv[1]) if l.strip()]' "$W/c.txt" | gzip > "$W/j.jsonl.gz"
cut hj.jsonl.gz "$W/j.jsonl.gz"
refused "half a .jsonl.gz" "hj.jsonl.gz: truncated gzip stream at byte" --input "$W/hj.jsonl.gz"
if command -v zstd > /dev/null; then
  zstd -q -c "$W/c.txt" > "$W/c.txt.zst"
  if "$B" prepare --quiet --input "$W/c.txt.zst" --output "$W/o" 2>&1 | grep -q "no zstd support"; then
    echo "skip: zstd cases (this build has no zstd)"
  else
    accepted "good .zst" --input "$W/c.txt.zst"
    cut h.txt.zst "$W/c.txt.zst"
    refused "half a .zst" "h.txt.zst: truncated zstd stream at byte $(stat -c%s "$W/h.txt.zst")" --input "$W/h.txt.zst"
    flip m.txt.zst "$W/c.txt.zst"
    refused "corrupt .zst" "m.txt.zst: corrupt zstd stream at byte" --input "$W/m.txt.zst"
    cp "$W/c.txt" "$W/x.txt.zst"
    refused "plain text named .zst" "x.txt.zst: not a zstd file: it starts with the bytes" --input "$W/x.txt.zst"
    { head -c 100000 "$W/c.txt" | zstd -q; tail -c +100001 "$W/c.txt" | zstd -q; } > "$W/mm.txt.zst"
    accepted "two-frame .zst" --input "$W/mm.txt.zst"
  fi
fi
# --output ending in '/'
rm -rf "$W/od"
"$B" prepare --quiet --input "$W/c.txt" --output "$W/od/" > "$W/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qF "ends in '/'" "$W/log" && [ ! -e "$W/od/.bin" ]; then ok "--output DIR/: $(cat "$W/log")"; else bad "--output DIR/: exit $rc $(cat "$W/log")"; fi
# BPE without byte fallback and without unk token: "x", "y", "z" have no entry
mk_tok() { # mk_tok FILE VOCAB_JSON
  printf '{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "decoder": null,
 "model": {"type": "BPE", "vocab": %s, "merges": ["a b"], "byte_fallback": false}}\n' "$2" > "$1"
}
mk_tok "$W/tok.json" '{"a": 0, "b": 1, "c": 2, " ": 3, "ab": 4}'
printf 'ab c\n\nxyz\n\nabx\n' > "$W/d.txt"
"$B" prepare --input "$W/d.txt" --tokenizer "$W/tok.json" --output "$W/od2" > "$W/log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qF "warning: 4 characters in 2 documents have no vocabulary entry and were dropped" "$W/log" &&
  grep -qF "the first 'x' at $W/d.txt:3" "$W/log"; then ok "dropped characters warned: $(grep warning "$W/log" | head -c 200)"
else bad "dropped characters: exit $rc $(cat "$W/log")"; fi
refused "--strict" "d.txt:3: character 'x' has no vocabulary entry" --input "$W/d.txt" --tokenizer "$W/tok.json" --strict
refused "--strict, digits" "c.txt:1: character '0' has no vocabulary entry" --input "$W/c.txt" --tokenizer "$W/tok.json" --strict
printf 'ab c\n\nba\n' > "$W/d2.txt"
"$B" prepare --input "$W/d2.txt" --tokenizer "$W/tok.json" --output "$W/od4" --strict > "$W/log" 2>&1 && ! grep -q warning "$W/log" &&
  ok "--strict accepts a covered text" || bad "--strict on a covered text: $(cat "$W/log")"
# duplicate vocabulary ids, duplicate JSON keys
mk_tok "$W/dupid.json" '{"a": 0, "b": 1, "c": 1, "ab": 4}'
refused "duplicate vocabulary id" 'model.vocab: tokens "b" and "c" both have id 1' --input "$W/d2.txt" --tokenizer "$W/dupid.json"
mk_tok "$W/dupkey.json" '{"a": 0, "b": 1, "a": 2, "ab": 4}'
refused "duplicate JSON key" "duplicate object key" --input "$W/d2.txt" --tokenizer "$W/dupkey.json"
finish
