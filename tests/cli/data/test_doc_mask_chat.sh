#!/usr/bin/env bash
# --doc-attention-mask takes its documents from the dataset's .idx document
# index, not from occurrences of --eod-id (issue 43, item 7). ChatML data
# (`prepare --format messages --chat-template chatml` with a tokenizer whose
# eos is <|im_end|>, which ends every message): one conversation is one
# document, so an answer attends to its question.
#  - equivalence: P = [conv1, conv2] and Q = [conv2, conv1] in one packed
#    row each; with document masks the logits (`shardlm dump`) of each
#    conversation are the same wherever it sits in the row, and the held-out
#    loss (`shardlm eval`) of P and of Q equals that of the two conversations
#    evaluated alone (each its own window, no packing);
#  - training, 2 ranks, shuffled order: PQ = [conv1, conv2, conv2, conv1],
#    one window per rank (P's row and Q's); the first step's loss equals the
#    conversations' loss alone;
#  - negative control: R = P's tokens with a document ending after every
#    <|im_end|> (the old eod rule's documents) gives other logits and another
#    loss, so both comparisons can fail;
#  - --eod-id 258 (<|im_end|>) inside documents: one warning with the count
#    (6 here, rank 0 only); data whose eod ends each document: no warning.
source "${SL_SRC:?}/tests/lib/run.sh" doc_mask_chat numpy mpi
tiny_model "$W/tiny" llama '"num_hidden_layers": 2'
mkdir -p "$W/tok"
"$PY" - "$W" <<'PY' || { echo "FAIL could not write the inputs"; exit 1; }
import json, sys
W = sys.argv[1]
# byte-level BPE without merges (each UTF-8 byte one id 0..255) + ChatML specials 256..258
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
added = [{"id": 256 + k, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for k, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
tok = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
       "decoder": bl, "model": {"type": "BPE", "unk_token": None, "byte_fallback": False,
                                "vocab": {chr(c): b for b, c in zip(bs, cs)}, "merges": []}}
json.dump(tok, open(W + "/tok/tokenizer.json", "w"))
json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, open(W + "/tok/tokenizer_config.json", "w"))
c1 = {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]}
c2 = {"messages": [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Red."},
                   {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "Blue."}]}
for name, rows in (("p", [c1, c2]), ("q", [c2, c1]), ("pq", [c1, c2, c2, c1]), ("c1", [c1]), ("c2", [c2])):
    open(f"{W}/{name}.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
for x in p q pq c1 c2; do
  "$B" prepare --tokenizer "$W/tok" --format messages --chat-template chatml --input "$W/$x.jsonl" \
    --output "$W/$x" > "$W/prep_$x.log" 2>&1 || { bad "prepare $x"; cat "$W/prep_$x.log"; finish; }
done
grep -q "eos 258" "$W/prep_p.log" && ok "prepare: ChatML rows, eos <|im_end|> = 258 ($(grep -o '[0-9]* documents, [0-9]* tokens' "$W/prep_p.log"))" ||
  bad "prepare does not report eos 258: $(cat "$W/prep_p.log")"
# R: P's tokens and mask, a document ending after every <|im_end|> (the documents of the old rule)
"$PY" - "$W" "$SL_SRC" <<'PY' > "$W/lens" || { echo "FAIL could not write R"; exit 1; }
import sys, shutil
import numpy as np
W, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, src + "/tests/ref")
import common
s = common.token_stream(W + "/p")
cut = [0] + [i + 1 for i, t in enumerate(s) if t == 258] + [len(s)]
common.idx_write(W + "/r", [s[a:b] for a, b in zip(cut, cut[1:]) if b > a])
shutil.copy(W + "/p.lmask", W + "/r.lmask")
idx = open(W + "/p.idx", "rb").read()
print(*np.frombuffer(idx[34:42], dtype=np.int32))  # the two conversations' lengths
PY
read -r L1 L2 < "$W/lens"
T=$((L1 + L2 - 1)) # one row: conv1 then conv2 (P), conv2 then conv1 (Q)
DOC="--doc-attention-mask true --eod-id 258"
"$B" train --model "$W/tiny" --init random --data "$W/p" --steps 1 --seq-len 16 --summary false --plot false \
  --out-dir "$W/init" --save "$W/m" > "$W/init.log" 2>&1 || { bad "writing the model"; tail -3 "$W/init.log"; finish; }
cp "$W/tiny/config.json" "$W/m/config.json"

# ---- dumps: each conversation's logits are the same in P's row and in Q's
for x in p q r; do
  "$B" dump --model "$W/m" --data "$W/$x" --data-order sequential --micro-batch 1 --seq-len $T --threads 1 \
    --out "$W/dump_$x.st" $DOC > "$W/dump_$x.log" 2>&1 || bad "dump $x: $(tail -2 "$W/dump_$x.log")"
done
cat > "$W/cmp.py" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1] + "/tests/ref")
import common
W, a, b, L1, L2 = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
la, lb = (common.st_read(f"{W}/dump_{x}.st")["logits"] for x in (a, b))
# a's row is conv1 then conv2, b's conv2 then conv1: positions of conv1 (L1 - 1 in b's row) and conv2 (L2 - 1 in a's)
pairs = ((la[:L1 - 1], lb[L2:L2 + L1 - 1]), (la[L1:L1 + L2 - 1], lb[:L2 - 1]))
err = max(float(np.abs(x - y).max()) for x, y in pairs) / float(np.abs(la).max())
print(f"{err:.3g}")
PY
E_PQ=$("$PY" "$W/cmp.py" "$SL_SRC" "$W" p q "$L1" "$L2")
E_RQ=$("$PY" "$W/cmp.py" "$SL_SRC" "$W" r q "$L1" "$L2")
TOL=1e-5
"$PY" -c "import sys; sys.exit(0 if float('$E_PQ') <= $TOL else 1)" &&
  ok "dump: each conversation's logits in P's row equal Q's (max diff / max|logit| $E_PQ <= $TOL; lengths $L1, $L2)" ||
  bad "dump: conversations attend across documents or messages: P vs Q $E_PQ > $TOL"
"$PY" -c "import sys; sys.exit(0 if float('$E_RQ') > 100 * $TOL else 1)" &&
  ok "negative control: a document per message (the old eod rule's) differs ($E_RQ > 100 x $TOL)" ||
  bad "negative control: R vs Q $E_RQ is not > 100 x $TOL"

# ---- the warning: --eod-id inside documents, once, with the count
n=$(grep -c "eod-id 258 occurs 6 times inside documents of $W/p" "$W/dump_p.log")
[ "$n" = 1 ] && ok "warning once: $(grep -o 'eod-id 258 occurs.*)' "$W/dump_p.log" | sed "s|$W/||")" ||
  bad "expected one warning with the count 6, found $n: $(cat "$W/dump_p.log")"
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/bytes" > /dev/null 2>&1
"$B" dump --model "$W/m" --data "$W/bytes" --micro-batch 1 --seq-len 16 --out "$W/dump_b.st" \
  --doc-attention-mask true --eod-id 256 > "$W/dump_b.log" 2>&1 && ! grep -q "occurs" "$W/dump_b.log" &&
  ok "no warning where --eod-id (256) ends each document (byte-level prepare)" || bad "byte-level data: $(cat "$W/dump_b.log")"

# ---- eval: the packed rows' held-out loss is that of the two conversations evaluated alone
evl() { # prefix seq-len [flags]: "loss tokens" of the first window
  "$B" eval --model "$W/m" --data "$W/$1" --seq-len "$2" --max-samples 1 --threads 1 --json "${@:3}" 2> "$W/eval_$1.err" |
    tail -n 1 | "$PY" -c "import json,sys; j = json.load(sys.stdin); print(repr(j['loss']), j['tokens'])" 2> /dev/null
}
read -r A1 N1 <<< "$(evl c1 $((L1 - 1)))"
read -r A2 N2 <<< "$(evl c2 $((L2 - 1)))"
REF=$("$PY" -c "print(repr(($A1 * $N1 + $A2 * $N2) / ($N1 + $N2)))" 2> /dev/null)
read -r LP NP <<< "$(evl p $T $DOC)"
read -r LQ NQ <<< "$(evl q $T $DOC)"
read -r LR NR <<< "$(evl r $T $DOC)"
"$PY" -c "import sys; f = lambda x: abs(float(x) - $REF) / $REF; sys.exit(0 if f('$LP') <= 1e-5 and f('$LQ') <= 1e-5 and f('$LR') > 1e-4 else 1)" 2> /dev/null &&
  ok "eval --doc-attention-mask: P $LP, Q $LQ == the conversations alone $REF (1e-5 rel); R (a document per message) $LR differs (> 1e-4 rel)" ||
  bad "eval: P ${LP:-none}, Q ${LQ:-none} vs the conversations alone ${REF:-none} (1e-5 rel); R ${LR:-none} must differ (> 1e-4 rel)"

# ---- training, 2 ranks, shuffled: the step-1 loss over PQ's two rows (P's and Q's, one more input
# each, whose target is masked) is the conversations' loss alone
$MPI -np 2 "$B" train --model "$W/m" --data "$W/pq" --data-order shuffled --seq-len $((L1 + L2)) --micro-batch 1 \
  --steps 1 --threads 1 --summary false --plot false --out-dir "$W/t2" $DOC > "$W/t2.log" 2>&1 || bad "2-rank run: $(tail -3 "$W/t2.log")"
LT=$("$PY" -c "import json; print(repr(json.loads(open('$W/t2/metrics.jsonl').readline())['loss']))" 2>/dev/null)
"$PY" -c "import sys; t, p = float('${LT:-nan}'), float('${REF:-nan}'); sys.exit(0 if abs(t - p) <= 1e-5 * abs(p) else 1)" &&
  [ "$(grep -c 'occurs 12 times' "$W/t2.log")" = 1 ] &&
  ok "train, 2 ranks, shuffled: step-1 loss $LT == the conversations alone $REF (1e-5 rel); one warning (12 inside)" ||
  bad "train 2 ranks: step-1 loss ${LT:-none} vs the conversations alone ${REF:-none}; warnings: $(grep -c occurs "$W/t2.log")"
finish
