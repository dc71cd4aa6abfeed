#!/usr/bin/env bash
# tests/cli/plan/test_plan_engine_arch.sh — the engine check needs no planner code
# per architecture: `shardlm plan --engine-check` on Mamba (the old planner
# only estimated its activations), Falcon-Mamba (its dt/B/C norms' kept
# activations and workspace), Mamba-2, Nemotron-H (Mamba-2, attention and
# MLP layers: two block kinds; and with MoE layers, M*E-E) and Mistral (tied, sliding window)
# against what `shardlm train --metrics` measures on the CPU backend: every
# arena of step 1 and the comm bytes of both steps must be equal (exactly;
# the CPU kernels' scratch is not in these arenas), and peak_bytes of
# step 1 too (from step 2 on a run's peak adds the CPU kernels' scratch);
# and negative controls (another sequence length; another Nemotron-H layer
# pattern).
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC (source root).
source "${SL_SRC:?}/tests/lib/run.sh" plan_engine_arch mpi
BIN=$B
export OMP_NUM_THREADS=1
tiny_model "$W/mamba" mamba '"num_hidden_layers": 2'
tiny_model "$W/falcon" mamba '"num_hidden_layers": 2, "architectures": ["FalconMambaForCausalLM"], "tie_word_embeddings": false'
tiny_model "$W/mamba2" mamba '"num_hidden_layers": 2, "architectures": ["Mamba2ForCausalLM"], "num_heads": 8, "head_dim": 8,
 "n_groups": 2, "time_step_rank": null, "tie_word_embeddings": false'
tiny_model "$W/nemotron_h" mamba '"architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "M*M-",
 "num_hidden_layers": null, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
 "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 8, "state_size": null, "expand": null,
 "time_step_rank": null, "tie_word_embeddings": false'
# Nemotron-H with MoE layers (M*E-E: the experts' companion units of the E layers only, the shared expert)
tiny_model "$W/nemotron_moe" nemotron_moe
# Granite 4.0-H with experts (fused experts' slabs, the shared MLP in the block unit)
tiny_model "$W/granite_moe" granite_moe
tiny_model "$W/mistral" mistral '"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
 "tie_word_embeddings": true'
# NAME MODEL WORLD FLAGS... (the same flags for train and plan): a run and its prediction
runs=()
run() {
  local name=$1 model=$2 world=$3
  shift 3
  timeout 120 $MPI -np "$world" "$BIN" train --model "$model" --init random --steps 2 --threads 1 --plot false \
    --summary false --metrics "$W/$name.jsonl" --out-dir "$W/o_$name" "$@" > "$W/$name.log" 2>&1 &&
    "$BIN" plan --engine-check --json --model "$model" --world "$world" "$@" > "$W/$name.plan" 2>> "$W/$name.log" ||
    { bad "$name: train or plan failed"; tail -5 "$W/$name.log"; return; }
  runs+=("$name")
}
run mamba_z2 "$W/mamba" 2 --zero 2 --micro-batch 2 --seq-len 16 --grad-accum 2
run mamba_z3_sel "$W/mamba" 2 --zero 3 --micro-batch 1 --seq-len 24 --activation-checkpoint selective
run falcon_z3_sel "$W/falcon" 2 --zero 3 --micro-batch 2 --seq-len 16 --activation-checkpoint selective
run mamba2_z3_sel "$W/mamba2" 2 --zero 3 --micro-batch 2 --seq-len 16 --activation-checkpoint selective
run mamba2_z1_full "$W/mamba2" 2 --zero 1 --micro-batch 1 --seq-len 24 --activation-checkpoint full --grad-accum 2
run nemotron_h_z3_sel "$W/nemotron_h" 2 --zero 3 --micro-batch 2 --seq-len 16 --activation-checkpoint selective
run nemotron_h_z1_full "$W/nemotron_h" 2 --zero 1 --micro-batch 1 --seq-len 24 --activation-checkpoint full --grad-accum 2
run nemotron_moe_z3_sel "$W/nemotron_moe" 2 --zero 3 --micro-batch 2 --seq-len 16 --activation-checkpoint selective
run nemotron_moe_z1_full "$W/nemotron_moe" 2 --zero 1 --micro-batch 1 --seq-len 24 --activation-checkpoint full --grad-accum 2
run granite_moe_z3_sel "$W/granite_moe" 2 --zero 3 --micro-batch 2 --seq-len 16 --activation-checkpoint selective
run mistral_z3 "$W/mistral" 3 --zero 3 --micro-batch 2 --seq-len 16 --grad-accum 2 --param-dtype bf16
# one line per case: "ok NAME" or "FAIL NAME: what differs"
while read -r verdict; do
  case "$verdict" in "ok   "*) ok "${verdict#ok   }" ;; *) bad "${verdict#FAIL }" ;; esac
done < <("$PY" - "$W" "${runs[@]}" <<'P'
import json, sys
d = sys.argv[1]
for name in sys.argv[2:]:
    steps = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    plan = json.load(open(f"{d}/{name}.plan"))
    want = [(a, steps[0]["arena_peak"][a], plan["arena_peak"][a])
            for a in ("params", "grads", "optim", "gather", "acts", "workspace")]
    want.append(("peak_bytes", steps[0]["peak_bytes"], plan["peak_bytes"]))
    want += [(f"step {s['step']} comm_bytes", s["comm_bytes"], plan["comm_bytes"]) for s in steps]
    bad = [f"{w}: engine {e} plan {p}" for w, e, p in want if e != p]
    if len(steps) != 2:
        bad.append(f"{len(steps)} metrics lines, want 2")
    print(f"FAIL {name}: " + "; ".join(bad) if bad else f"ok   {name} (arenas, peak and comm bytes equal)")
P
)
# negative control: a different sequence length must show in the activations
if [ -f "$W/mamba_z2.jsonl" ] && "$BIN" plan --engine-check --model "$W/mamba" --world 2 --zero 2 --micro-batch 2 \
    --seq-len 24 --grad-accum 2 --json > "$W/neg.plan" 2>/dev/null &&
    "$PY" -c "import json,sys; a=json.loads(open(sys.argv[1]).readline()); b=json.load(open(sys.argv[2])); sys.exit(0 if a['arena_peak']['acts'] != b['arena_peak']['acts'] else 1)" "$W/mamba_z2.jsonl" "$W/neg.plan"; then
  ok "negative control (seq-len 24 predicts other activations than the seq-len 16 run)"
else
  bad "negative control: a seq-len 24 prediction matches the seq-len 16 run"
fi
# the layer kinds: M**- (attention where M*M- has its second Mamba-2 layer) must predict other activations than
# the M*M- run
mkdir -p "$W/nemotron_h_attn"
sed 's/"M\*M-"/"M**-"/' "$W/nemotron_h/config.json" > "$W/nemotron_h_attn/config.json"
if [ -f "$W/nemotron_h_z3_sel.jsonl" ] && grep -q '"M\*\*-"' "$W/nemotron_h_attn/config.json" &&
    "$BIN" plan --engine-check --model "$W/nemotron_h_attn" --world 2 --zero 3 --micro-batch 2 --seq-len 16 \
      --activation-checkpoint selective --json > "$W/neg_nh.plan" 2>/dev/null &&
    "$PY" -c "import json,sys; a=json.loads(open(sys.argv[1]).readline()); b=json.load(open(sys.argv[2])); sys.exit(0 if a['arena_peak']['acts'] != b['arena_peak']['acts'] else 1)" "$W/nemotron_h_z3_sel.jsonl" "$W/neg_nh.plan"; then
  ok "negative control (Nemotron-H M**- predicts other activations than the M*M- run)"
else
  bad "negative control: a Nemotron-H M**- prediction matches the M*M- run"
fi
finish
