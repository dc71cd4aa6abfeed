#!/usr/bin/env bash
# The device trainer on the CPU: build/shardlm_emu (the CLI linked against the
# emulated CUDA backend, tests/cuda_emu) trains with --backend cuda against
# build/shardlm --backend cpu, tiny shapes, few steps (docs/cuda.md, "The
# emulated trainer"). The tolerances of test_cuda_train.sh: fp32 losses within
# 1e-4 relative; --compute-dtype bf16 against the CPU mirror within 1e-3
# (Llama, Qwen3); Mistral, Mamba, Mamba-2, Nemotron-H (dense, and with MoE layers),
# Granite 4.0-H (the last four their weights too),
# Qwen3 and Gemma 3 in fp32 too;
# ZeRO-3 against ZeRO-0 bit for bit on the device path; --compute-dtype auto
# = bf16 on a device; --tf32 true changes the fp32 GEMMs within 1e-4 and is
# refused on the CPU. World 1 uses the
# one-rank device comms (device copies: the ZeRO-3 check is near-trivial
# there); under mpirun the ranks run the real shard/comm_nccl.c over the
# NCCL stand-in (tests/cuda_emu/nccl.cpp): ZeRO-1 and ZeRO-3 at 2 ranks and
# ZeRO-1 and ZeRO-3 at 4 ranks (ZeRO-1 = ZeRO-3 bit for bit), hybrid
# sharding (4 ranks, shard groups of 2) against the CPU backend at the
# same layout; bf16 gathers and reductions, and bf16 compute against the CPU
# mirror, at 2 ranks. Streams run deferred
# with the race detector on; one run repeats under another SL_EMU_SEED. fsdp's
# comm -> compute waits are device-side (sl_comm_wait_stream): the summary
# counts them, and with the emulator dropping the compute stream's event
# waits (SL_EMU_PLANT=no-stream-wait) the run aborts with a race report.
source "${SL_SRC:?}/tests/lib/run.sh" emu_train mpi numpy
emu_need # E: build/shardlm_emu (tests/lib/run.sh)
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
tiny_data "$W/data"
# --peak-tflops: no 1024^3 GEMM on the reference cuBLASLt at start-up (minutes);
# --compute-dtype fp32: the fp32 cases (auto is bf16 on a device; a later
# flag of a run overrides it)
A="--init random --data $W/data --data-order sequential --steps 3 --micro-batch 2 --seq-len 16 --threads 1 --summary false --plot false
  --peak-tflops 1 --compute-dtype fp32"
run() { # name np binary model [flags...]: emu_run with the model, saved
  local n=$1 np=$2 bin=$3 m=$4
  shift 4
  emu_run "$n" "$np" "$bin" --model "$W/$m" --save "$W/$n/model" "$@"
}
check() { emu_check "$@"; } # a b compare-flags...
# world 1: fp32, ZeRO-3 = ZeRO-0, bf16 compute against the CPU mirror
run cpu 1 "$B" llama --backend cpu --zero 0
run emu0 1 "$E" llama --backend cuda --zero 0 && check emu0 cpu --rtol 1e-4 --loss-only
run emu3 1 "$E" llama --backend cuda --zero 3 && check emu3 emu0 --exact
run cpub 1 "$B" llama --backend cpu --zero 0 --compute-dtype bf16
run emub 1 "$E" llama --backend cuda --zero 0 --compute-dtype bf16 && check emub cpub --rtol 1e-3 --loss-only
# --compute-dtype auto on a device is bf16 (the same run as emub, which --tf32 auto also puts on TF32), said so
run emua 1 "$E" llama --backend cuda --zero 0 --compute-dtype auto && check emua emub --exact &&
  { grep -q "compute bf16 (--compute-dtype auto on a device)" "$W/emua.log" && ok "auto = bf16 on a device, said" ||
    bad "emua.log does not say that auto resolved to bf16"; }
# --tf32 true under fp32 compute: TF32 GEMMs (the emulator rounds their operands to 10 mantissa bits), near
# the CPU's fp32 (1e-4: measured 2.7e-6 on losses near 5.5) and not equal to the strict fp32 run
run emut 1 "$E" llama --backend cuda --zero 0 --tf32 true && check emut cpu --rtol 1e-4 --loss-only &&
  { ! $CMP "$W/emut" "$W/emu0" --exact > /dev/null 2>&1 && ok "--tf32 true changes the fp32 GEMMs" ||
    bad "--tf32 true ran the same as strict fp32"; }
"$B" train $A --model "$W/llama" --out-dir "$W/tf32cpu" --backend cpu --tf32 true > "$W/tf32cpu.log" 2>&1
rc_is "--tf32 true on --backend cpu refused" $? 2 "$W/tf32cpu.log" "TF32 is a tensor-core GEMM mode"
# Mistral (sliding window), Mamba (conv + selective scan), Falcon-Mamba (the weightless dt/B/C norms),
# Qwen3 (q/k norms: a strided rmsnorm per head; q/k/v/o biases), Qwen3 also in bf16 against the CPU mirror,
# and Mixtral (the MoE ops, grouped GEMMs)
tiny_model "$W/mistral" mistral '"num_hidden_layers": 2'
tiny_model "$W/mamba" mamba '"num_hidden_layers": 2'
tiny_model "$W/falcon" mamba '"num_hidden_layers": 2, "architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba"'
# Mamba-2 (the SSD scan op, strided x | B | C and dt, two groups, the per-group gated norm)
tiny_model "$W/mamba2" mamba '"num_hidden_layers": 2, "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
 "num_heads": 8, "head_dim": 8, "n_groups": 2, "time_step_rank": null, "tie_word_embeddings": false'
# Nemotron-H (M*M-: Mamba-2 mixers, attention without RoPE, the squared-ReLU MLP's relu2 op; two block kinds)
tiny_model "$W/nemotron_h" mamba '"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
 "hybrid_override_pattern": "M*M-", "num_hidden_layers": null, "intermediate_size": 48, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 2,
 "ssm_state_size": 8, "state_size": null, "expand": null, "time_step_rank": null, "tie_word_embeddings": false'
# Granite 4.0-H (two sub-layers an HF layer, one B/C group, the four muP multipliers: scale_add on the device)
tiny_model "$W/granite_h" mamba '"architectures": ["GraniteMoeHybridForCausalLM"], "num_hidden_layers": 2,
 "layer_types": ["mamba", "attention"], "num_attention_heads": 4, "num_key_value_heads": 2,
 "shared_intermediate_size": 48, "num_local_experts": 0, "mamba_n_heads": 8, "mamba_d_state": 8, "state_size": null,
 "expand": null, "conv_kernel": null, "time_step_rank": null, "layer_norm_epsilon": null, "embedding_multiplier": 12.0,
 "residual_multiplier": 0.22, "attention_multiplier": 0.0625, "logits_scaling": 4.0'
# Nemotron-H with 'E' layers (M*E-E: the sigmoid router with routed_scaling_factor, relu^2 experts, the shared
# expert beside them; the router's sigmoid mode of moe_route_fwd / _bwd on the device)
tiny_model "$W/nemotron_moe" nemotron_moe
# Granite 4.0-H with experts (the fused experts' slabs, the shared MLP beside them)
tiny_model "$W/granite_moe" granite_moe
tiny_model "$W/qwen3" llama '"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2,
 "head_dim": 12, "attention_bias": true'
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
# Gemma 3 (geglu, scale_add's 1 + w, (1 + w) q/k norms, the local RoPE table on layers 0, 2)
tiny_model "$W/gemma3" tied '"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 3, "head_dim": 8,
 "sliding_window": 6, "sliding_window_pattern": 2, "rope_local_base_freq": 100.0, "query_pre_attn_scalar": 8'
for m in mistral mamba falcon mamba2 nemotron_h nemotron_moe granite_h granite_moe qwen3 mixtral gemma3; do
  run cpu_$m 1 "$B" $m --backend cpu --zero 0
  run emu_$m 1 "$E" $m --backend cuda --zero 0 && check emu_$m cpu_$m --rtol 1e-4 --loss-only
done
# the weights too for the Mamba-2 mixer's families (relative L2 within 1e-4; Nemotron-H measured 7.2e-7): over 3
# steps a wrong backward can hide in the losses (relu2_bwd's 2x dropped moves them by 5e-6 only, the weights by 6e-3)
for m in mamba2 nemotron_h nemotron_moe granite_h granite_moe; do
  [ -d "$W/emu_$m/model" ] && check emu_$m cpu_$m --rtol 1e-4
done
# Mixtral with the routing options (capacity drops, the z-loss, the expert bias; docs/models.md)
MOE_OPTS="--moe-capacity-factor 1.0 --moe-z-loss-coef 0.05 --moe-balance bias --moe-bias-rate 0.02"
run cpu_moeopts 1 "$B" mixtral --backend cpu --zero 0 $MOE_OPTS
run emu_moeopts 1 "$E" mixtral --backend cuda --zero 0 $MOE_OPTS && check emu_moeopts cpu_moeopts --rtol 1e-4 --loss-only
run cpub_qwen3 1 "$B" qwen3 --backend cpu --zero 0 --compute-dtype bf16
run emub_qwen3 1 "$E" qwen3 --backend cuda --zero 0 --compute-dtype bf16 && check emub_qwen3 cpub_qwen3 --rtol 1e-3 --loss-only
# 2 ranks over the NCCL stand-in: ZeRO-1 and ZeRO-3 against the CPU backend
# at the same layout, ZeRO-3 = ZeRO-0 on the device; hybrid sharding at 4
# ranks (shard groups of 2: the device comms of both groups)
run c2z3 2 "$B" llama --backend cpu --zero 3 --summary true
for z in 0 1; do run e2z$z 2 "$E" llama --backend cuda --zero $z; done
run e2z3 2 "$E" llama --backend cuda --zero 3 --summary true
# the device-side waits: counted on every rank of the device run, no such line on the CPU
n=$(grep -cE "device-side waits [1-9][0-9]* " "$W/e2z3.log")
if [ "$n" = 2 ] && ! grep -q "device-side waits" "$W/c2z3.log"; then ok "device-side waits on both ranks, none on the CPU"
else bad "device-side waits: $n rank lines (want 2)"; grep -E "device-side|blocked" "$W/e2z3.log" "$W/c2z3.log"; fi
grep -m 1 "device-side waits" "$W/e2z3.log" | sed 's/^/     /'
# negative control: the compute stream's event waits dropped, a gathered buffer is read unordered
SL_EMU_PLANT=no-stream-wait $MPI -np 2 "$E" train $A --model "$W/llama" --out-dir "$W/plant" --backend cuda --zero 3 \
  > "$W/plant.log" 2>&1
if [ $? -ne 0 ] && grep -q "cuda-emu: race on device bytes .*nccl" "$W/plant.log"; then ok "planted missing wait: race"
else bad "planted missing wait not reported"; tail -5 "$W/plant.log"; fi
grep -m 1 -o "cuda-emu: race on device bytes .\{0,160\}" "$W/plant.log" | sed 's/^/     /'
check e2z1 c2z3 --rtol 1e-4 --loss-only
check e2z3 c2z3 --rtol 1e-4 --loss-only
check e2z3 e2z0 --exact
check e2z1 e2z0 --exact
# another interleaving of the compute and comm streams (and of blocks and threads): the
# same results bit for bit, and no race reported (docs/cuda.md "Streams")
SL_EMU_SEED=2 run e2z3s 2 "$E" llama --backend cuda --zero 3 && check e2z3s e2z3 --exact
# bf16 gathers and reductions (ncclBfloat16 sums, rounded per step as the MPI backend's)
run c2b 2 "$B" llama --backend cpu --zero 3 --param-dtype bf16 --reduce-dtype bf16
run e2b 2 "$E" llama --backend cuda --zero 3 --param-dtype bf16 --reduce-dtype bf16 && check e2b c2b --rtol 1e-4 --loss-only
# bf16 compute at 2 ranks (ZeRO-3; bf16 activation storage and residual stream): the device against the CPU mirror
run c2bc 2 "$B" llama --backend cpu --zero 3 --compute-dtype bf16
run e2bc 2 "$E" llama --backend cuda --zero 3 --compute-dtype bf16 && check e2bc c2bc --rtol 1e-3 --loss-only
# --offload-params on a device backend would leave the shards in device memory: refused by name
"$E" train $A --model "$W/llama" --out-dir "$W/op" --backend cuda --zero 3 --offload-params cpu > "$W/op.log" 2>&1
rc_is "--offload-params cpu on --backend cuda refused" $? 2 "$W/op.log" "--offload-params cpu on a device backend is not implemented"
run c4h 4 "$B" llama --backend cpu --zero 3 --shard-group 2
run e4h 4 "$E" llama --backend cuda --zero 3 --shard-group 2 && check e4h c4h --rtol 1e-4 --loss-only
# 4 ranks, one shard group: ZeRO-3 against the CPU, ZeRO-1 = ZeRO-3 bit for bit
run c4z3 4 "$B" llama --backend cpu --zero 3
run e4z3 4 "$E" llama --backend cuda --zero 3 && check e4z3 c4z3 --rtol 1e-4 --loss-only
run e4z1 4 "$E" llama --backend cuda --zero 1 && check e4z1 e4z3 --exact
finish
