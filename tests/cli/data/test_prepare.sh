#!/usr/bin/env bash
# shardlm prepare through the CLI: every input kind (.txt split three ways,
# .jsonl plain / gzip / zstd, several inputs), the fine-tuning formats and
# their loss masks, bad rows (file:line, exit 2, --skip-bad), no partial
# output, workers. Expected tokens are computed independently in Python from
# the inputs (byte-level: UTF-8 bytes, end-of-document 256).
source "${SL_SRC:?}/tests/lib/run.sh" prepare numpy

cat > "$W/gen.py" <<'PY'
import json, gzip, sys, random
W = sys.argv[1]
random.seed(7)
texts = ["plain ascii %d" % i for i in range(50)] + ["héllo wörld ✓ 日本語 🙂👍🏽", "tab\there", "quote \" and \\ slash", "", "cr\r\nlf"]
with open(W + "/a.jsonl", "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t, "body": t.upper()}, ensure_ascii=(i % 2 == 0)) + "\n")
        if i == 3: f.write("\n")  # blank rows are skipped
with gzip.open(W + "/b.jsonl.gz", "wt", encoding="utf-8") as f:
    for t in texts[:20]: f.write(json.dumps({"text": t[::-1]}) + "\n")
with open(W + "/p.txt", "w", newline="") as f:
    f.write("para one line 1\npara one line 2\n\n\npara two\r\n\r\nlast para, no newline")
with open(W + "/pc.jsonl", "w") as f:
    for i in range(30):
        f.write(json.dumps({"prompt": "Q%d: what is %d+%d?" % (i, i, i), "completion": " %d" % (2 * i)}) + "\n")
with open(W + "/msg.jsonl", "w") as f:
    for i in range(10):
        m = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi %d" % i},
             {"role": "assistant", "content": "hello %d" % i}]
        if i % 2: m += [{"role": "user", "content": "again"}, {"role": "assistant", "content": "yes"}]
        f.write(json.dumps({"messages": m}) + "\n")
with open(W + "/bad.jsonl", "w") as f:
    f.write(json.dumps({"text": "good 1"}) + "\n")
    f.write('{"text": "broken\n')                       # line 2: invalid JSON
    f.write(json.dumps({"txt": "no key"}) + "\n")     # line 3: missing key
    f.write(json.dumps({"text": 5}) + "\n")           # line 4: not a string
    f.write(json.dumps({"text": "good 2"}) + "\n")
with open(W + "/badutf8.jsonl", "wb") as f:
    f.write(b'{"text": "ok"}\n{"text": "\xff\xfe"}\n')
PY
$PY "$W/gen.py" "$W" || { echo "FAIL: generator"; exit 1; }
# the zstd case needs the zstd command (tools/setup installs it); without it
# the case is reported as a skip, which fails under SL_REQUIRE_ALL=1 (CI)
if ! zstd -q -f "$W/a.jsonl" -o "$W/a.jsonl.zst" 2>/dev/null; then
  echo "SKIP: no zstd command: the .jsonl.zst case is not run"
  [ "${SL_REQUIRE_ALL:-0}" = 1 ] && { echo "FAIL: SL_REQUIRE_ALL=1 and the zstd case cannot run"; exit 1; }
fi

# check PREFIX KIND ARGS: compares PREFIX.bin/.idx(/.lmask) with the Python expectation
cat > "$W/check.py" <<'PY'
import json, gzip, sys, numpy as np
W, prefix, kind = sys.argv[1], sys.argv[2], sys.argv[3]
EOD = 256
def enc(s): return list(s.encode("utf-8"))
docs, masks = [], []
def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        for l in f:
            if l.strip(): yield json.loads(l)
if kind == "a":      # a.jsonl then b.jsonl.gz, key text
    for p in ("a.jsonl", "b.jsonl.gz"):
        for r in rows(W + "/" + p): docs.append(enc(r["text"]) + [EOD])
elif kind == "body":
    for r in rows(W + "/a.jsonl"): docs.append(enc(r["body"]) + [EOD])
elif kind in ("blank", "lines", "file"):
    raw = open(W + "/p.txt", "rb").read().decode()
    lines = raw.split("\n")
    if kind == "lines": docs = [enc(l) + [EOD] for l in lines if l not in ("", "\r")]
    elif kind == "file": docs = [enc(raw.rstrip("\n")) + [EOD]]
    else:
        cur = None
        for l in lines:
            if l in ("", "\r"):
                if cur is not None: docs.append(enc("\n".join(cur)) + [EOD]); cur = None
            else: cur = (cur or []) + [l]
        if cur is not None: docs.append(enc("\n".join(cur)) + [EOD])
elif kind == "pc":
    for r in rows(W + "/pc.jsonl"):
        p, c = enc(r["prompt"]), enc(r["completion"])
        docs.append(p + c + [EOD]); masks.append([0] * len(p) + [1] * len(c) + [1])
elif kind in ("msg", "msgrole"):  # msgrole: --chat-role assistant=bot
    for r in rows(W + "/msg.jsonl"):
        d, m = [], []
        for x in r["messages"]:
            a = 1 if x["role"] == "assistant" else 0
            role = "bot" if a and kind == "msgrole" else x["role"]
            h, c, t = enc("<%s>\n" % role), enc(x["content"]), enc("</s>\n")
            d += h + c + t; m += [0] * len(h) + [a] * (len(c) + len(t))
        docs.append(d + [EOD]); masks.append(m + [1])
elif kind == "skip":
    docs = [enc("good 1") + [EOD], enc("good 2") + [EOD]]
flat = [t for d in docs for t in d]
got = np.fromfile(prefix + ".bin", dtype=np.uint16)
idx = open(prefix + ".idx", "rb").read()
ns = int.from_bytes(idx[18:26], "little")
sizes = np.frombuffer(idx[34:34 + 4 * ns], dtype=np.int32)
err = []
if idx[17] != 8: err.append("dtype code %d, expected 8 (uint16)" % idx[17])
if list(sizes) != [len(d) for d in docs]: err.append("document sizes %s... expected %s..." % (list(sizes)[:5], [len(d) for d in docs][:5]))
if len(got) != len(flat) or not (got == np.array(flat)).all(): err.append("tokens differ (%d vs %d)" % (len(got), len(flat)))
import os
if masks:
    mb = open(prefix + ".lmask", "rb").read()
    if mb[:8] != b"SLLMASK1": err.append("lmask magic")
    if int.from_bytes(mb[8:16], "little") != len(flat): err.append("lmask count")
    if list(mb[16:]) != [t for m in masks for t in m]: err.append("lmask bytes differ")
elif os.path.exists(prefix + ".lmask"): err.append("unexpected .lmask")
print("; ".join(err) if err else "ok")
sys.exit(1 if err else 0)
PY
expect() { # name kind prepare-args...
  local name=$1 kind=$2; shift 2
  if "$B" prepare --quiet --output "$W/$name" "$@" > "$W/$name.log" 2>&1 &&
     $PY "$W/check.py" "$W" "$W/$name" "$kind" >> "$W/$name.log" 2>&1; then ok "$name"; else bad "$name: $(tail -3 "$W/$name.log")"; fi
}
expect jsonl a --input "$W/a.jsonl" --input "$W/b.jsonl.gz"
expect body body --input "$W/a.jsonl" --json-key body
[ -f "$W/a.jsonl.zst" ] && expect zst body --input "$W/a.jsonl.zst" --json-key body
expect blank blank --input "$W/p.txt"
expect lines lines --input "$W/p.txt" --split-lines
expect file file --input "$W/p.txt" --doc-per-file
expect pc pc --input "$W/pc.jsonl" --format prompt-completion
expect msg msg --input "$W/msg.jsonl" --format messages --chat-template '<{role}>\n{content}</s>\n'
expect msgrole msgrole --input "$W/msg.jsonl" --format messages --chat-template '<{role}>\n{content}</s>\n' --chat-role assistant=bot
expect skip skip --input "$W/bad.jsonl" --skip-bad
# workers do not change the output
"$B" prepare --quiet --input "$W/a.jsonl" --input "$W/b.jsonl.gz" --output "$W/w1" --workers 1 &&
"$B" prepare --quiet --input "$W/a.jsonl" --input "$W/b.jsonl.gz" --output "$W/w2" --workers 3 &&
  cmp -s "$W/w1.bin" "$W/w2.bin" && cmp -s "$W/w1.idx" "$W/w2.idx" && ok "workers 1 vs 3: the same output" || bad "workers 1 vs 3 differ"
# a text-format run over a fine-tuning prefix removes its stale mask
cp "$W/pc.lmask" "$W/jsonl.lmask"
expect jsonl2 a --input "$W/a.jsonl" --input "$W/b.jsonl.gz"
"$B" prepare --quiet --input "$W/a.jsonl" --input "$W/b.jsonl.gz" --output "$W/jsonl" && [ ! -e "$W/jsonl.lmask" ] && ok "stale .lmask removed" || bad "stale .lmask kept"

# a Hugging Face tokenizer.json (written here: byte-level BPE without merges
# over 70,256 ids, so each UTF-8 byte is one id, plus special tokens): int32
# output (Megatron's rule for >= 65,500 ids), the EOS of tokenizer_config.json
# appended, special tokens of a chat template matched as single ids
mkdir -p "$W/tok"
$PY - "$W" <<'PY'
import json, sys
W = sys.argv[1]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
for i in range(70000): vocab["<dummy%d>" % i] = 256 + i
added = [{"id": 70256 + k, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for k, t in enumerate(["<eos>", "<bos>", "<|start|>", "<|end|>"])]
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
       "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
json.dump(tok, open(W + "/tok/tokenizer.json", "w"))
json.dump({"eos_token": "<eos>", "bos_token": "<bos>"}, open(W + "/tok/tokenizer_config.json", "w"))
with open(W + "/chat.jsonl", "w") as f:
    for i in range(5):
        f.write(json.dumps({"messages": [{"role": "user", "content": "q%d é" % i}, {"role": "assistant", "content": "a%d 🙂" % i}]}) + "\n")
PY
cat > "$W/check_hf.py" <<'PY'
import json, sys, numpy as np
W, prefix, kind = sys.argv[1:4]
EOS, BOS, START, END = 70256, 70257, 70258, 70259
def enc(s): return list(s.encode("utf-8"))
docs, masks = [], []
if kind == "text":
    for l in open(W + "/a.jsonl"):
        if l.strip(): docs.append(enc(json.loads(l)["text"]) + [EOS])
else:
    for l in open(W + "/chat.jsonl"):
        d, m = [BOS], [0]
        for x in json.loads(l)["messages"]:
            a = x["role"] == "assistant"
            h, c, t = [START] + enc(x["role"] + "\n"), enc(x["content"]), [END]
            d += h + c + t; m += [0] * len(h) + [int(a)] * (len(c) + len(t))
        docs.append(d + [EOS]); masks.append(m + [1])
flat = [t for d in docs for t in d]
idx = open(prefix + ".idx", "rb").read()
got = np.fromfile(prefix + ".bin", dtype=np.int32)
err = []
if idx[17] != 4: err.append("dtype code %d, expected 4 (int32)" % idx[17])
if len(got) != len(flat) or not (got == np.array(flat)).all(): err.append("tokens differ: %s vs %s" % (list(got[:12]), flat[:12]))
if masks and list(open(prefix + ".lmask", "rb").read()[16:]) != [t for m in masks for t in m]: err.append("mask differs")
print("; ".join(err) or "ok"); sys.exit(1 if err else 0)
PY
"$B" prepare --quiet --tokenizer "$W/tok" --append-eod --input "$W/a.jsonl" --output "$W/hf" > "$W/hf.log" 2>&1 &&
  $PY "$W/check_hf.py" "$W" "$W/hf" text >> "$W/hf.log" 2>&1 && ok "tokenizer.json, int32" || bad "tokenizer.json, int32: $(tail -2 "$W/hf.log")"
"$B" prepare --quiet --tokenizer "$W/tok/tokenizer.json" --append-eod --prepend-bos --format messages \
  --chat-template '<|start|>{role}\n{content}<|end|>' --input "$W/chat.jsonl" --output "$W/hfc" > "$W/hfc.log" 2>&1 &&
  $PY "$W/check_hf.py" "$W" "$W/hfc" chat >> "$W/hfc.log" 2>&1 && ok "chat template with special tokens" || bad "chat template with special tokens: $(tail -2 "$W/hfc.log")"
printf 'ok\n\xff\xfe bad\n' > "$W/badutf8.txt"

# bad input: exit 2, file:line named, nothing left at the prefix, a good old file kept
refuse() { # name pattern args...
  local name=$1 pat=$2; shift 2
  "$B" prepare --quiet --output "$W/$name" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$W/$name.log" && ! ls "$W/$name".* 2>/dev/null | grep -qv '\.log$'; then ok "$name"
  else bad "$name: exit $rc, expected 2 and '$pat': $(cat "$W/$name.log")"; fi
}
refuse r_json "bad.jsonl:2: invalid JSON" --input "$W/bad.jsonl"
$PY - "$W" <<'PY'
import json, sys
W = sys.argv[1]
open(W + "/nokey.jsonl", "w").write(json.dumps({"text": "a"}) + "\n" + json.dumps({"txt": "b"}) + "\n")
open(W + "/num.jsonl", "w").write(json.dumps({"text": 5}) + "\n")
open(W + "/pcbad.jsonl", "w").write(json.dumps({"prompt": "p"}) + "\n")
open(W + "/msgbad.jsonl", "w").write(json.dumps({"messages": [{"role": "user"}]}) + "\n")
PY
refuse r_key 'nokey.jsonl:2: key "text" is missing' --input "$W/nokey.jsonl"
refuse r_num 'num.jsonl:1: key "text" is not a string' --input "$W/num.jsonl"
refuse r_utf8 "badutf8.jsonl:2" --input "$W/badutf8.jsonl"
refuse r_pc 'pcbad.jsonl:1: key "completion" is missing' --input "$W/pcbad.jsonl" --format prompt-completion
refuse r_msg 'msgbad.jsonl:1: messages\[0\]: "content"' --input "$W/msgbad.jsonl" --format messages --chat-template '{role}:{content}'
refuse r_tmpl "needs --chat-template" --input "$W/msg.jsonl" --format messages
refuse r_role "--chat-role expects FROM=TO" --input "$W/msg.jsonl" --format messages --chat-template chatml --chat-role bot
refuse r_fmt "needs JSON rows" --input "$W/p.txt" --format prompt-completion
refuse r_missing "missing.jsonl: cannot open" --input "$W/missing.jsonl"
refuse r_empty "no documents" --input "$W/bad.jsonl" --json-key nothing --skip-bad
refuse r_txtutf8 "badutf8.txt:2: invalid UTF-8" --input "$W/badutf8.txt" --split-lines --tokenizer "$W/tok"
refuse r_noeos "no end-of-sequence token" --input "$W/a.jsonl" --tokenizer "$SL_SRC/tests/fixtures/tokenizer/synth_a.json" --append-eod
refuse r_flag "unexpected argument" --input "$W/a.jsonl" --bogus
refuse r_workers "--workers must be" --input "$W/a.jsonl" --workers 0
printf 'not gzip at all' > "$W/fake.jsonl.gz"
refuse r_gz "fake.jsonl.gz" --input "$W/fake.jsonl.gz"
# a failed run over an existing dataset leaves the old files as they were
cp "$W/jsonl.bin" "$W/keep.bin"; cp "$W/jsonl.idx" "$W/keep.idx"
"$B" prepare --quiet --input "$W/bad.jsonl" --output "$W/jsonl" > /dev/null 2>&1
cmp -s "$W/jsonl.bin" "$W/keep.bin" && cmp -s "$W/jsonl.idx" "$W/keep.idx" && ! ls "$W"/jsonl.*tmp* > /dev/null 2>&1 \
  && ok "a failed prepare left the existing dataset as it was" || bad "a failed prepare changed the existing dataset or left temporary files"
finish
