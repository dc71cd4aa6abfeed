#!/bin/bash
# tests/cli/train/test_moe_bias_save.sh — issue 43 item 9: the expert bias of
# --moe-balance bias is neither ignored nor dropped without a word.
# --moe-bias-rate without --moe-balance bias, or on a dense model, is refused
# (exit 2, from a flag and from --config). --save (2 ranks) writes the
# learned bias as DeepSeek-V3's model.layers.N.<block>.gate.
# e_score_correction_bias (Mixtral block_sparse_moe, Qwen3-MoE mlp), equal to
# the checkpoint's, with a warning that transformers' class ignores it;
# `shardlm eval` of the saved model reads it back (= the logged eval_loss;
# the control: the same weights without the bias evaluate differently); a
# continued run keeps it (--steps 0 saves the same bytes), one under
# --moe-balance none drops it (a warning); the HF round trip
# through a checkpoint is byte-identical and the checkpoint holds it; a run
# without the bias writes no such tensor and no warning.
source "${SL_SRC:?}/tests/lib/run.sh" moe_bias_save mpi
MOE='"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/moe" llama "$MOE"
tiny_model "$W/q3" llama '"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2,
 "head_dim": 12, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": true'
tiny_model "$W/dense" llama '"num_hidden_layers": 1'
tiny_data "$W/data" 20000
tail -c 3000 "$SL_SRC/configs/corpus.txt" > "$W/held.txt"
"$B" prepare --input "$W/held.txt" --output "$W/held" > /dev/null 2>&1 || bad "prepare the held-out set"
A="--data $W/data --seq-len 16 --micro-batch 2 --threads 1 --summary false --plot false"
E="--data $W/held --seq-len 16 --micro-batch 2 --threads 1 --max-samples 5 --json"

# 1. --moe-bias-rate is the bias's rate: refused where there is no bias
"$B" train --model "$W/moe" $A --init random --steps 1 --moe-bias-rate 0.01 --out-dir "$W/r1" > "$W/r1.log" 2>&1
rc_is "--moe-bias-rate without --moe-balance bias refused" $? 2 "$W/r1.log" "--moe-bias-rate is the expert bias's update rate: it needs --moe-balance bias (found aux)"
"$B" train --model "$W/moe" $A --init random --steps 1 --moe-balance none --moe-bias-rate 0.02 --out-dir "$W/r2" > "$W/r2.log" 2>&1
rc_is "... with --moe-balance none" $? 2 "$W/r2.log" "(found none)"
# the default's value written out (a run.json lists every setting) changes nothing and is accepted
"$B" train --model "$W/moe" $A --init random --steps 1 --moe-balance none --moe-bias-rate 1e-3 --out-dir "$W/r2b" > "$W/r2b.log" 2>&1
rc_is "--moe-bias-rate at its default's value accepted without the bias" $? 0 "$W/r2b.log" "trained 1 steps"
echo '{"moe_bias_rate": 0.01}' > "$W/rate.json"
"$B" train --model "$W/moe" $A --init random --steps 1 --config "$W/rate.json" --out-dir "$W/r3" > "$W/r3.log" 2>&1
rc_is "... from --config" $? 2 "$W/r3.log" "it needs --moe-balance bias"
"$B" train --model "$W/dense" $A --init random --steps 1 --moe-bias-rate 0.01 --out-dir "$W/r4" > "$W/r4.log" 2>&1
rc_is "... on a dense model" $? 2 "$W/r4.log" "--moe-bias-rate: LlamaForCausalLM has no experts"

# 2. --save writes the learned bias (2 ranks; checkpoint and held-out loss at step 3)
$MPI -np 2 "$B" train --model "$W/moe" $A --init random --init random --steps 3 --moe-balance bias --moe-bias-rate 0.05 --eval-every 3 \
  --eval-data "$W/held" --eval-samples 5 --ckpt-dir "$W/b/ck" --out-dir "$W/b" --save "$W/b/model" > "$W/b.log" 2>&1
rc_is "2 ranks, --moe-balance bias, --save" $? 0 "$W/b.log" \
  "warn: $W/b/model: the expert bias is saved as model.layers.0.block_sparse_moe.gate.e_score_correction_bias"
grep -q "transformers' MixtralForCausalLM has no expert bias and ignores it" "$W/b.log" && ok "the warning names the class" ||
  bad "the warning does not name MixtralForCausalLM"
# biases FILE: the e_score_correction_bias tensors (name shape values), one a line
biases() {
  "$PY" - "$1" << 'P'
import array, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for k in sorted(h):
    if k.endswith("e_score_correction_bias"):
        lo, hi = h[k]["data_offsets"]
        print(k, h[k]["shape"], h[k]["dtype"], list(array.array("f", b[8 + n + lo:8 + n + hi])))
P
}
ckb=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1] + "/step-000003/manifest.json"))["moe_expert_bias"])' "$W/b/ck")
got=$(biases "$W/b/model/model.safetensors")
want=$("$PY" -c 'import sys; b = eval(sys.argv[1])
for l in range(2): print("model.layers.%d.block_sparse_moe.gate.e_score_correction_bias [4] F32" % l, b[4 * l:4 * l + 4])' "$ckb")
if [ "$got" = "$want" ] && "$PY" -c 'import sys; sys.exit(0 if any(eval(sys.argv[1])) else 1)' "$ckb"; then
  ok "the saved e_score_correction_bias tensors (2 layers x 4, F32) = the checkpoint's bias (nonzero)"
else bad "saved bias: '$got', checkpoint: '$ckb'"; fi
# eval reads it back: the logged eval_loss; the control: without the bias tensors another loss
logged=$("$PY" -c 'import json,sys; print([json.loads(l)["eval_loss"] for l in open(sys.argv[1]) if "eval_loss" in l][-1])' "$W/b/metrics.jsonl")
ev() {
  "$B" eval --model "$1" $E > "$W/ev.log" 2>&1
  "$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["loss"])' "$W/ev.log"
}
l1=$(ev "$W/b/model")
[ "$l1" = "$logged" ] && ok "shardlm eval of the saved model = the logged eval_loss ($l1)" || bad "shardlm eval $l1, logged $logged"
grep -q "the expert bias (e_score_correction_bias) read: it shifts the top-k selection, held fixed" "$W/ev.log" &&
  ok "eval says it read the bias" || { bad "eval does not say it read the bias"; cat "$W/ev.log"; }
mkdir -p "$W/nobias"
cp "$W/b/model/config.json" "$W/nobias/"
"$PY" - "$W/b/model/model.safetensors" "$W/nobias/model.safetensors" << 'P'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
keep = {k: v for k, v in h.items() if not k.endswith("e_score_correction_bias")}
data, out = b[8 + n:], {}
blob = b""
for k, v in keep.items():
    if k == "__metadata__": out[k] = v; continue
    lo, hi = v["data_offsets"]
    out[k] = dict(v, data_offsets=[len(blob), len(blob) + hi - lo])
    blob += data[lo:hi]
hj = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
P
l0=$(ev "$W/nobias")
[ -n "$l0" ] && [ "$l0" != "$l1" ] && ok "the control: the same weights without the bias evaluate to $l0" ||
  bad "the control: without the bias '$l0', with it '$l1'"
# a continued run keeps it: --steps 0 --save writes the same bytes
"$B" train --model "$W/b/model" $A --steps 0 --moe-balance bias --out-dir "$W/c" --save "$W/c/model" > "$W/c.log" 2>&1
rc_is "a run from the saved model" $? 0 "$W/c.log" "the expert bias (e_score_correction_bias) read: it shifts the top-k selection, --moe-balance bias updates it"
cmp -s "$W/b/model/model.safetensors" "$W/c/model/model.safetensors" && ok "... keeps the bias (--steps 0 saves the same bytes)" ||
  bad "a run from the saved model changed or dropped the bias"
# --moe-balance none: a run without a bias (said), its save has none
"$B" train --model "$W/b/model" $A --steps 0 --moe-balance none --out-dir "$W/c2" --save "$W/c2/model" > "$W/c2.log" 2>&1
rc_is "--moe-balance none from the saved model" $? 0 "$W/c2.log" "the expert bias (e_score_correction_bias) is not used (--moe-balance none)"
[ -z "$(biases "$W/c2/model/model.safetensors")" ] && ok "... saves no bias" || bad "--moe-balance none saved a bias"
# the HF round trip through a checkpoint
"$B" convert --from-hf "$W/b/model" --to-ckpt "$W/rt" > "$W/rt.log" 2>&1 &&
  "$B" convert --from-ckpt "$W/rt" --model-config "$W/b/model" --to-hf "$W/rt/hf" >> "$W/rt.log" 2>&1 || bad "convert round trip"
rtb=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1] + "/step-000000/manifest.json")).get("moe_expert_bias"))' "$W/rt")
[ "$rtb" = "$ckb" ] && cmp -s "$W/b/model/model.safetensors" "$W/rt/hf/model.safetensors" &&
  ok "HF -> checkpoint (which holds the bias) -> HF is byte-identical" || bad "round trip: checkpoint bias '$rtb', files differ?"

# 3. Qwen3-MoE's naming (mlp.gate); a run without the bias writes none and says nothing
"$B" train --model "$W/q3" $A --init random --steps 2 --moe-balance bias --moe-bias-rate 0.05 --out-dir "$W/q" --save "$W/q/model" > "$W/q.log" 2>&1
rc_is "Qwen3-MoE with the bias" $? 0 "$W/q.log" "transformers' Qwen3MoeForCausalLM has no expert bias"
[ "$(biases "$W/q/model/model.safetensors" | cut -d' ' -f1 | tr '\n' ' ')" = "model.layers.0.mlp.gate.e_score_correction_bias model.layers.1.mlp.gate.e_score_correction_bias " ] &&
  ok "Qwen3-MoE: model.layers.N.mlp.gate.e_score_correction_bias" || bad "Qwen3-MoE names: $(biases "$W/q/model/model.safetensors")"
"$B" train --model "$W/moe" $A --init random --steps 2 --out-dir "$W/n" --save "$W/n/model" > "$W/n.log" 2>&1
rc_is "no --moe-balance bias" $? 0 "$W/n.log"
[ -z "$(biases "$W/n/model/model.safetensors")" ] && ! grep -q "expert bias" "$W/n.log" &&
  ok "... no bias tensor, no warning" || bad "a run without the bias wrote one or warned"
finish
