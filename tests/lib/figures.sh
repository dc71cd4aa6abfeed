#!/usr/bin/env bash
# Prints the figures a restructuring must keep bit for bit: per-step loss,
# grad norm, held-out loss, bytes moved and per-arena peaks of a set of runs
# (ZeRO 0-3, hybrid sharding, offload, checkpointing, bf16, Mistral, Mamba,
# Qwen3, Gemma 3, Mixtral, Mamba-2, Nemotron-H, Granite 4.0-H; TP, SP, PP, TP x PP, zb1p), the sha256 of
# each saved model, and the planner's engine-check output. Run it before and
# after a change and diff the two outputs:
#   SL_BUILD=build bash tests/lib/figures.sh > before.txt
set -u
B=$(cd "${SL_BUILD:-build}" && pwd)/shardlm
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/sl-figures.XXXXXX)
trap 'rm -rf "$W"' EXIT
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
mkdir -p "$W/llama" "$W/mistral" "$W/mamba"
cat > "$W/llama/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 48, "intermediate_size": 80,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
 "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
J
cat > "$W/mistral/config.json" <<'J'
{"architectures": ["MistralForCausalLM"], "hidden_size": 48, "intermediate_size": 80,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
 "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 6,
 "tie_word_embeddings": true}
J
cat > "$W/mamba/config.json" <<'J'
{"architectures": ["MambaForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2,
 "state_size": 8, "expand": 2, "conv_kernel": 4, "time_step_rank": 4, "vocab_size": 300,
 "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true}
J
"$B" prepare --input "$SRC/configs/corpus.txt" --output "$W/data" > /dev/null || exit 1
COMMON="--init random --data $W/data --data-order shuffled --steps 6 --seq-len 16 --micro-batch 2 --lr 1e-3 \
  --warmup 2 --clip 0.5 --threads 1 --summary false --plot false --log-every 100"
fig() { # name np [flags...]
  local name=$1 np=$2; shift 2
  $MPI -np "$np" "$B" train $COMMON --out-dir "$W/$name" --save "$W/$name/model" "$@" > "$W/$name.log" 2>&1 \
    || { echo "$name: FAILED"; tail -3 "$W/$name.log"; return; }
  /usr/bin/python3 - "$W/$name/metrics.jsonl" "$name" <<'P'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    a = j.get("arena_peak", {})
    ev = [f"eval={j['eval_loss']!r}"] if "eval_loss" in j else []
    print(sys.argv[2], j["step"], repr(j["loss"]), repr(j["grad_norm"]), *ev, j["comm_bytes"], j["peak_bytes"],
          " ".join(f"{k}={v}" for k, v in sorted(a.items())))
P
  echo "$name model $(cat "$W/$name/model/"*.safetensors | sha256sum | cut -c1-16)"
  if [ -d "$W/$name/ck" ]; then
    echo "$name ckpt $(find "$W/$name/ck" -type f -name 'rank-*.bin' | sort | xargs cat | sha256sum | cut -c1-16)"
  fi
}
fig l1z0 1 --model "$W/llama" --zero 0
fig l2z3 2 --model "$W/llama" --zero 3
fig l2z1ga 2 --model "$W/llama" --zero 1 --grad-accum 2
fig l4hs 4 --model "$W/llama" --zero 2 --shard-group 2
fig l2off 2 --model "$W/llama" --zero 3 --offload-optimizer cpu
fig l2ac 2 --model "$W/llama" --zero 3 --activation-checkpoint full --prefetch 2
fig l2bf 2 --model "$W/llama" --zero 3 --param-dtype bf16 --reduce-dtype bf16
fig m2z3 2 --model "$W/mistral" --zero 3
fig mb2z2 2 --model "$W/mamba" --zero 2
fig def2 2 --zero 3
# checkpoint bytes: a run that writes one
$MPI -np 2 "$B" train $COMMON --model "$W/llama" --zero 3 --out-dir "$W/ck" --ckpt-dir "$W/ck/ckpt" > /dev/null 2>&1
echo "ckpt $(find "$W/ck/ckpt" -type f -name 'rank-*.bin' | sort | xargs cat | sha256sum | cut -c1-16)"
# the parallel layouts: TP, TP + SP, PP (1f1b, tied, interleaved), TP x PP,
# hybrid sharding x TP, zb1p under TP x PP, held-out losses, checkpoints
mkdir -p "$W/llama4" "$W/tied4" "$W/mamba4"
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 4/' "$W/llama/config.json" > "$W/llama4/config.json"
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 4/; s/"num_key_value_heads": 2/"num_key_value_heads": 1/;
     s/"vocab_size": 300/"vocab_size": 259/' "$W/mistral/config.json" > "$W/tied4/config.json"
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 4/' "$W/mamba/config.json" > "$W/mamba4/config.json"
HO="--split 90,10,0 --eval-every 2 --eval-samples 6"
fig t2 2 --model "$W/llama4" --tp 2 --zero 3 --eps 1e-6 --ckpt-dir "$W/t2/ck"
fig t2sp 4 --model "$W/llama4" --tp 2 --sequence-parallel --zero 2 --grad-accum 2
fig t2hs 8 --model "$W/llama4" --tp 2 --zero 3 --shard-group 2
fig tt2 2 --model "$W/tied4" --tp 2 --zero 1
fig mt2 2 --model "$W/mamba4" --tp 2 --sequence-parallel --zero 0
fig p2 2 --model "$W/llama4" --pp 2 --grad-accum 4 --zero 1 --ckpt-dir "$W/p2/ck"
fig p2t 4 --model "$W/tied4" --pp 2 --grad-accum 4 --zero 3
fig p2il 2 --model "$W/llama4" --pp 2 --pp-schedule interleaved --pp-virtual 2 --grad-accum 4
fig t2p2 8 --model "$W/llama4" --tp 2 --pp 2 --grad-accum 2 --zero 1 $HO --ckpt-dir "$W/t2p2/ck"
fig t2p2sp 4 --model "$W/tied4" --tp 2 --pp 2 --sequence-parallel --grad-accum 4 --zero 3
fig t2p2zb 4 --model "$W/mamba4" --tp 2 --pp 2 --sequence-parallel --pp-schedule zb1p --grad-accum 4
fig hs4 4 --model "$W/llama4" --zero 3 --shard-group 2 $HO
# the other block variants: Qwen3 (q/k norms, biases), Gemma 3 (sandwich norms, GeGLU, two RoPE tables),
# Mixtral (the sparse MLP; EP), Mamba-2 (the SSD scan; TP + SP, zb1p)
mkdir -p "$W/qwen3" "$W/gemma3" "$W/mixtral" "$W/mamba2"
cat > "$W/qwen3/config.json" <<'J'
{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 48, "intermediate_size": 80, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 300, "attention_bias": true,
 "tie_word_embeddings": false}
J
cat > "$W/gemma3/config.json" <<'J'
{"architectures": ["Gemma3ForCausalLM"], "hidden_size": 48, "intermediate_size": 80, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 3, "vocab_size": 300, "sliding_window": 6,
 "sliding_window_pattern": 2, "rope_local_base_freq": 100.0, "query_pre_attn_scalar": 16}
J
cat > "$W/mixtral/config.json" <<'J'
{"architectures": ["MixtralForCausalLM"], "hidden_size": 48, "intermediate_size": 40, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 300, "num_local_experts": 4,
 "num_experts_per_tok": 2, "tie_word_embeddings": false}
J
cat > "$W/mamba2/config.json" <<'J'
{"architectures": ["Mamba2ForCausalLM"], "hidden_size": 32, "num_hidden_layers": 4, "num_heads": 8, "head_dim": 8,
 "n_groups": 2, "state_size": 8, "conv_kernel": 4, "vocab_size": 300, "use_bias": true,
 "time_step_limit": [0.001, 0.08]}
J
fig q2z3 2 --model "$W/qwen3" --zero 3
fig g2t2 2 --model "$W/gemma3" --tp 2 --sequence-parallel --zero 1
fig x2ep 2 --model "$W/mixtral" --ep 2 --zero 3
fig x2z3 2 --model "$W/mixtral" --zero 3 --activation-checkpoint selective
fig mm2z3 2 --model "$W/mamba2" --zero 3 --activation-checkpoint full
fig mm2tp 4 --model "$W/mamba2" --tp 2 --pp 2 --sequence-parallel --pp-schedule zb1p --grad-accum 4
# the hybrids: decoder layers of two kinds (Nemotron-H M * M -: TP + SP, PP zb1p; Granite 4.0-H: its multipliers,
# two sub-layers an HF layer)
mkdir -p "$W/nemotron" "$W/granite"
cat > "$W/nemotron/config.json" <<'J'
{"architectures": ["NemotronHForCausalLM"], "hidden_size": 32, "intermediate_size": 48, "hybrid_override_pattern": "M*M-",
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8,
 "n_groups": 2, "ssm_state_size": 8, "conv_kernel": 4, "vocab_size": 300, "mlp_bias": true}
J
cat > "$W/granite/config.json" <<'J'
{"architectures": ["GraniteMoeHybridForCausalLM"], "hidden_size": 32, "num_hidden_layers": 3,
 "layer_types": ["mamba", "attention", "mamba"], "num_attention_heads": 4, "num_key_value_heads": 2,
 "shared_intermediate_size": 48, "num_local_experts": 0, "mamba_n_heads": 8, "mamba_d_state": 8, "vocab_size": 300,
 "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0625, "logits_scaling": 4.0,
 "tie_word_embeddings": true}
J
fig nhz3 2 --model "$W/nemotron" --zero 3 --activation-checkpoint selective
fig nhtp 4 --model "$W/nemotron" --tp 2 --pp 2 --sequence-parallel --pp-schedule zb1p --grad-accum 4
fig grz3 2 --model "$W/granite" --zero 3 --activation-checkpoint full
fig grpp 2 --model "$W/granite" --pp 2 --pp-schedule zb1p --grad-accum 2
for z in 0 1 2 3; do
  echo "plan z$z: $("$B" plan --engine-check --model "$W/llama" --world 2 --zero $z --micro-batch 2 --seq-len 16 --json 2>&1 | sha256sum | cut -c1-16)"
done
