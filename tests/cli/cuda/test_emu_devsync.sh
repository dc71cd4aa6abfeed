#!/usr/bin/env bash
# What a device training step costs the host, measured (docs/cuda.md,
# "Per-step syncs and allocations"): build/shardlm_emu (the emulated CUDA
# backend) trains 4 steps and each metrics line's "dev" counters (the
# context's cudaMalloc/cudaFree, stream waits, waited downloads and uploads
# since the line before) must show, from step 2 on, no allocation or free
# and exactly one download (the loss, every unit's gradient sum of squares,
# fetched together) and 1 + uploads host waits (the uploads: the tokens and
# targets of each micro-batch, 2 a micro-batch). World 1 and 2 ranks at
# ZeRO-3, grad-accum 2 (a loss slot per micro-batch), TP 2 (the one running
# sum of the counted tensors; the loss-parallel head's max all-reduce is
# staged through the host: one more download and upload a micro-batch),
# bf16 compute (the operand stage grows in step 1 only), PP 2 (the first
# stage: the staged boundary, one round trip a micro-batch, on top). The
# losses and norms stay the CPU backend's (1e-4 relative, the emulated
# trainer's tolerance: docs/cuda.md, "The emulated trainer").
# Negative control: a mixture of experts still downloads its routing
# statistics per layer (documented), and the same check fails on it.
source "${SL_SRC:?}/tests/lib/run.sh" emu_devsync mpi numpy
emu_need
tiny_model "$W/llama" llama '"num_hidden_layers": 2'
tiny_data "$W/data"
A="--init random --data $W/data --data-order sequential --steps 4 --micro-batch 2 --seq-len 16 --threads 1 --summary false
  --plot false --peak-tflops 1 --model $W/llama --compute-dtype fp32" # fp32 unless a run says bf16 (auto: bf16 on a device)
# counters RUN MICRO STAGED [WANT]: steps 2-4 of RUN's metrics (rank 0)
# against the budget, STAGED round trips (a download and an upload) a
# micro-batch on top; WANT fail: the check must fail (the negative control)
counters() {
  "$PY" - "$W/$1/metrics.jsonl" "$2" "$3" > "$W/$1.cnt" 2>&1 << 'P'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
micro, staged = int(sys.argv[2]), int(sys.argv[3])
bad = []
for j in lines:
    d = j["dev"]
    print(f"step {j['step']}: {d}")
    if j["step"] < 2:
        continue
    down, up = 1 + staged * micro, (2 + staged) * micro
    want = {"allocs": 0, "frees": 0, "downloads": down, "uploads": up, "syncs": down + up}
    bad += [f"step {j['step']} {k} {d[k]} (want {v})" for k, v in want.items() if d[k] != v]
print("over budget: " + "; ".join(bad) if bad else "within budget")
sys.exit(1 if bad or len(lines) != 4 else 0)
P
  local rc=$?
  if [ "${4:-}" = fail ]; then
    if [ $rc -ne 0 ]; then ok "$1: the check fails ($(tail -1 "$W/$1.cnt" | cut -c1-120))"; else bad "$1: the check passed"; fi
  elif [ $rc -eq 0 ]; then ok "$1: steps 2-4 allocate nothing, $((1 + $3 * $2)) download(s), $((1 + 2 * $3 * $2 + 2 * $2)) waits a step"
  else bad "$1 counters"; cat "$W/$1.cnt"; fi
  sed -n 1,2p "$W/$1.cnt" | sed 's/^/     /'
}
emu_run c1 1 "$B" --backend cpu --zero 3
emu_run e1 1 "$E" --backend cuda --zero 3 && counters e1 1 0 && emu_check e1 c1 --rtol 1e-4 --loss-only
# the CPU backend reports zeros
if "$PY" -c "import json,sys; sys.exit(any(any(json.loads(l)['dev'].values()) for l in open('$W/c1/metrics.jsonl')))"; then
  ok "cpu: every dev counter 0"
else bad "cpu: nonzero dev counters"; fi
emu_run c1g 1 "$B" --backend cpu --zero 3 --grad-accum 2
emu_run e1g 1 "$E" --backend cuda --zero 3 --grad-accum 2 && counters e1g 2 0 && emu_check e1g c1g --rtol 1e-4 --loss-only
emu_run c2 2 "$B" --backend cpu --zero 3
emu_run e2 2 "$E" --backend cuda --zero 3 && counters e2 1 0 && emu_check e2 c2 --rtol 1e-4 --loss-only
emu_run c2t 2 "$B" --backend cpu --tp 2 --zero 3
emu_run e2t 2 "$E" --backend cuda --tp 2 --zero 3 && counters e2t 1 1 && emu_check e2t c2t --rtol 1e-4 --loss-only
emu_run e1b 1 "$E" --backend cuda --zero 3 --compute-dtype bf16 && counters e1b 1 0
# PP 2 (rank 0, the first stage): the same one download, plus the staged boundary (an activation sent, a
# gradient received: one round trip a micro-batch)
emu_run c2p 2 "$B" --backend cpu --zero 1 --pp 2 --grad-accum 2 --micro-batch 1
emu_run e2p 2 "$E" --backend cuda --zero 1 --pp 2 --grad-accum 2 --micro-batch 1 && counters e2p 2 1 &&
  emu_check e2p c2p --rtol 1e-4 --loss-only
# the negative control: a mixture of experts still downloads its routing statistics per layer (documented)
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
emu_run e1m 1 "$E" --backend cuda --zero 3 --model "$W/mixtral" && counters e1m 1 0 fail
finish
