#!/usr/bin/env bash
# `shardlm generate` without --tokenizer (issue 43, item 6): the model
# directory's tokenizer.json encodes the prompt (the same ids as passing it
# with --tokenizer); without one, a text prompt (or text output) on a model
# whose vocabulary is not byte-level (vocab_size over 512) is refused with
# exit 2 instead of being fed as bytes; --tokenizer bytes asks for the
# bytes on purpose; a byte-level model (257..512) still takes a text prompt.
# Before the fix the prompt was fed as bytes with exit 0.
source "${SL_SRC:?}/tests/lib/run.sh" generate_tokenizer
TOK=$SL_SRC/tests/fixtures/tokenizer/synth_c.json
tiny_data "$W/d" 4000
# weights: one step from --init random, saved (vocab 1000 > 512: not byte-level)
mk() { # DIR VOCAB
  tiny_model "$1" llama "\"vocab_size\": $2, \"num_hidden_layers\": 1, \"initializer_range\": 1.0"
  "$B" train --model "$1" --init random --data "$W/d" --steps 1 --seq-len 8 --micro-batch 1 --threads 1 \
    --summary false --plot false --out-dir "$1.run" --save "$1" > "$1.log" 2>&1 || { bad "weights of $1"; tail -3 "$1.log"; finish; }
}
mk "$W/big" 1000
mk "$W/byte" 300
G=(generate --max-new-tokens 6 --temperature 0)

"$B" "${G[@]}" --model "$W/big" --prompt "hello world 123" > "$W/no-tok.log" 2>&1
rc_is "text prompt, vocab 1000, no tokenizer.json: refused" $? 2 "$W/no-tok.log" "has no tokenizer.json"
"$B" "${G[@]}" --model "$W/big" --prompt-ids 5,6,7 > "$W/no-tok-ids.log" 2>&1
rc_is "--prompt-ids printed as text, vocab 1000, no tokenizer.json: refused" $? 2 "$W/no-tok-ids.log" "--print-ids"
"$B" "${G[@]}" --model "$W/big" --prompt-ids 5,6,7 --print-ids > "$W/ids.log" 2>&1
rc_is "--prompt-ids with --print-ids needs no tokenizer" $? 0 "$W/ids.log"
"$B" "${G[@]}" --model "$W/big" --tokenizer bytes --prompt "hello" --print-ids > "$W/bytes.log" 2>&1
rc_is "--tokenizer bytes: the bytes on purpose" $? 0 "$W/bytes.log"

# the directory's tokenizer.json: the ids of an explicit --tokenizer run
cp "$TOK" "$W/big/tokenizer.json"
"$B" "${G[@]}" --model "$W/big" --prompt "hello world 123" --print-ids > "$W/own.out" 2> "$W/own.err"
rc_is "text prompt with the directory's tokenizer.json" $? 0 "$W/own.err" "tokenizer $W/big/tokenizer.json"
"$B" "${G[@]}" --model "$W/big" --tokenizer "$TOK" --prompt "hello world 123" --print-ids > "$W/given.out" 2>&1
"$B" "${G[@]}" --model "$W/big" --tokenizer bytes --prompt "hello world 123" --print-ids > "$W/asbytes.out" 2>&1
if [ -s "$W/own.out" ] && cmp -s "$W/own.out" "$W/given.out"; then
  ok "the directory's tokenizer.json gives --tokenizer's ids ($(head -c 40 "$W/own.out"))"
else bad "ids without --tokenizer '$(cat "$W/own.out")' vs with '$(cat "$W/given.out")'"; fi
# negative control: the bytes of the prompt continue differently, so the comparison can fail
if ! cmp -s "$W/own.out" "$W/asbytes.out"; then ok "control: the prompt as bytes gives other ids ($(head -c 40 "$W/asbytes.out"))"
else bad "control: bytes and tokenizer give the same ids (the check above is vacuous)"; fi
"$B" "${G[@]}" --model "$W/big" --prompt "hello world 123" > "$W/text.out" 2> /dev/null
grep -q "^hello world 123" "$W/text.out" && ok "text out decoded by the directory's tokenizer" \
  || bad "text output: $(head -c 80 "$W/text.out")"

# a byte-level model (vocab 300) without a tokenizer still takes a text prompt
"$B" "${G[@]}" --model "$W/byte" --prompt "hello" > "$W/byte.out" 2> "$W/byte.err"
rc_is "byte-level model (vocab 300): text prompt as bytes" $? 0 "$W/byte.err"
[ "$(head -c 5 "$W/byte.out")" = hello ] && ok "byte-level model: the prompt's bytes printed first" || bad "byte-level output"
finish
