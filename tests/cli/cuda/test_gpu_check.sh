#!/usr/bin/env bash
# tools/gpu-check's logic without a GPU (docs/cuda.md, "GPU window"):
#  - --dry-run runs step 0 only, says that no GPU is visible, exits 0;
#  - without a GPU and without --fake-gpu it stops after step 0 with exit 1;
#  - without a bundle it says "no bundle: run tools/gpu-bundle first" and
#    stops after step 0 with exit 1 (nothing is built on the device);
#  - with a fake bundle (shell scripts standing in for the binaries: a kernel
#    test printing rel=/tol= lines, a bench printing one JSON line per
#    sequence length of --seqs, one test that exits 77) and --fake-gpu: the
#    benchmark runs first, the skip counts as a failure and is rerun with
#    CUDA_LAUNCH_BLOCKING=1, the worst error/tolerance ratio and one line per
#    sequence length (MFU, attention and GEMM TFLOP/s, exposed comm, peak vs
#    predicted) reach the summary, the summary stays within 40 lines, the
#    logs are tarred when more than 8 files;
#  - a benchmark that outlives BENCH_S is cut there (TIMEOUT) and the line of
#    the length it finished still reaches the summary; a deadline too short
#    for the steps reports them as not run.
source "${SL_SRC:?}/tests/lib/run.sh" gpu_check
S=$SL_SRC
has() { grep -q -- "$2" "$1"; }
have_gpu=0
command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1 && have_gpu=1

# fake bundle
F="$W/fake/shardlm-gpu"
mkdir -p "$F/tests" "$F/lib"
cat > "$F/tests/test_cuda_kernels" <<'X'
#!/bin/sh
echo "linear_fwd y                   n=100      max_abs=1.000e-06 rel=2.000e-05 tol=1e-04  ok"
echo "attn_bwd hd128 w0 dqkv         n=100      max_abs=1.000e-06 rel=5.000e-05 tol=1e-04  ok"
echo "swiglu                         n=100      max_abs=0.000e+00 rel=1.000e-06 tol=1e-05  ok"
echo "3 passed, 0 failed"
X
printf '#!/bin/sh\necho "2 passed, 0 failed"\n' > "$F/tests/test_memops"
printf '#!/bin/sh\necho "51 passed, 0 failed"\n' > "$F/tests/test_cuda_tcattn"
printf '#!/bin/sh\necho "test_cuda_nccl: skipped (stand-in)"\nexit 77\n' > "$F/tests/test_cuda_nccl"
# the bench stand-in: one JSON line per length of --seqs; with SL_FAKE_BENCH_SLEEP it sleeps after the first
cat > "$F/shardlm" <<'X'
#!/bin/bash
echo "bench stand-in $*"
seqs=
while [ $# -gt 0 ]; do [ "$1" = --seqs ] && seqs=$2; shift; done
n=0
for s in ${seqs//,/ }; do
  n=$((n + 1))
  echo "{\"bench\": \"gpu\", \"seq\": $s, \"tokens_per_s\": 1.0, \"mfu\": 0.$n, \"attn_tflops\": 1$n.5, \"gemm_tflops\": 6$n.25, \"comm_exposed\": 0.0$n, \"peak_bytes\": $((n * 3 * 1073741824)), \"peak_predicted\": $((n * 2 * 1073741824)), \"arenas_equal\": $([ $n = 1 ] && echo true || echo false), \"arenas_differ\": \"$([ $n = 2 ] && echo acts,gather)\", \"scratch_bytes\": $((n * 1073741824))}"
  [ $n = 1 ] && [ -n "${SL_FAKE_BENCH_SLEEP:-}" ] && sleep "$SL_FAKE_BENCH_SLEEP"
done
exit 0
X
chmod +x "$F/shardlm" "$F"/tests/*
mkdir -p "$W/b"
tar -C "$W/fake" -czf "$W/b/shardlm-gpu.tar.gz" shardlm-gpu
echo "fake bundle for tests/cli/cuda/test_gpu_check.sh" > "$W/b/MANIFEST.txt"
export SL_GPU_BUNDLE="$W/b" SL_GPU_DIR="$W/unpacked"

OUT="$W/dry" "$S/tools/gpu-check" --dry-run > "$W/dry.txt" 2>&1
rc=$?
if [ $rc -eq 0 ] && has "$W/dry/summary.txt" "dry run: step 0 only" && has "$W/dry/logs/00-facts.log" "ldd shardlm"; then
  ok "--dry-run: step 0, exit 0"
else bad "--dry-run (exit $rc)"; cat "$W/dry.txt"; fi
if [ $have_gpu -eq 0 ]; then
  has "$W/dry/summary.txt" "no GPU visible" && ok "--dry-run says no GPU" || bad "--dry-run does not say no GPU"
  OUT="$W/nogpu" "$S/tools/gpu-check" > "$W/nogpu.txt" 2>&1
  rc=$?
  [ $rc -eq 1 ] && has "$W/nogpu/summary.txt" "stopped after step 0" && ok "no GPU: stops after step 0, exit 1" ||
    { bad "no GPU run (exit $rc)"; cat "$W/nogpu.txt"; }
fi

OUT="$W/nobundle" SL_GPU_BUNDLE="$W/none" "$S/tools/gpu-check" --fake-gpu > "$W/nobundle.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && has "$W/nobundle/summary.txt" "no bundle: run tools/gpu-bundle first" &&
  has "$W/nobundle/summary.txt" "stopped after step 0" && ! has "$W/nobundle/summary.txt" "^PASS\|^FAIL  *kernels" &&
  ok "no bundle: says run tools/gpu-bundle first, exit 1 after step 0" ||
  { bad "no bundle run (exit $rc)"; cat "$W/nobundle.txt"; }

OUT="$W/fake-out" DEADLINE_S=600 "$S/tools/gpu-check" --fake-gpu > "$W/fake.txt" 2>&1
rc=$?
SUM="$W/fake-out/summary.txt"
mkdir -p "$W/fake-logs"
tar -C "$W/fake-logs" -xzf "$W/fake-out/logs.tar.gz" 2> /dev/null
LOGS_F=$(ls "$W"/fake-logs/logs/*-bench-gpu.log 2> /dev/null | head -1)
LOGS_F=${LOGS_F:-/nonexistent}
[ $rc -ne 0 ] && ok "a skipped step fails the check (exit $rc)" || bad "exit 0 despite a skip"
has "$SUM" "^PASS  *kernels-fp32" && ok "kernel stand-in PASS" || bad "kernels-fp32 not PASS"
has "$SUM" "FAIL(skip) *nccl-ws1.*CUDA_LAUNCH_BLOCKING=1: rc 77" && ok "skip = FAIL, rerun with CUDA_LAUNCH_BLOCKING=1" ||
  bad "skip not failed/rerun"
has "$SUM" "worst error/tolerance: 0.5 .*attn_bwd hd128" && ok "worst error/tolerance ratio 0.5 (attn_bwd)" || bad "worst ratio wrong"
first=$(grep -m1 -E '^(PASS|FAIL|TIMEOUT)' "$SUM" | awk '{print $2}')
[ "$first" = bench-gpu ] && ok "the benchmark runs first" || bad "first step is '$first', not bench-gpu"
has "$LOGS_F" "bench gpu --seqs 1024,4096 --steps 3" && ok "bench gpu --seqs 1024,4096" || bad "bench flags"
L1="bench seq 1024: MFU 10.0%, attention 11.5 TFLOP/s, GEMM 61.2 TFLOP/s, comm exposed 1.0%, peak 3.00 GiB vs predicted 2.00 + scratch 1.00 GiB, arenas equal"
L2="bench seq 4096: MFU 20.0%, attention 12.5 TFLOP/s, GEMM 62.2 TFLOP/s, comm exposed 2.0%, peak 6.00 GiB vs predicted 4.00 + scratch 2.00 GiB, arenas differ: acts,gather"
grep -qxF "$L1" "$SUM" && grep -qxF "$L2" "$SUM" && ok "one summary line per sequence length" ||
  { bad "bench summary lines"; grep bench "$SUM"; }
n=$(wc -l < "$SUM")
[ "$n" -le 40 ] && ok "summary $n lines (<= 40)" || bad "summary $n lines"
nf=$(find "$W/fake-out" -type f | wc -l)
if [ -f "$W/fake-out/logs.tar.gz" ] && [ "$nf" -le 8 ] && tar tzf "$W/fake-out/logs.tar.gz" | grep -q "00-facts.log"; then
  ok "logs tarred: $nf files come back"
else bad "logs not tarred ($nf files)"; fi

OUT="$W/short" DEADLINE_S=20 BENCH_S=6 SL_FAKE_BENCH_SLEEP=30 "$S/tools/gpu-check" --fake-gpu > "$W/short.txt" 2>&1
SS="$W/short/summary.txt"
has "$SS" "^TIMEOUT *bench-gpu" && grep -qxF "$L1" "$SS" && ! has "$SS" "bench seq 4096" &&
  ok "BENCH_S caps the benchmark; the finished length's line is kept" || { bad "BENCH_S"; cat "$W/short.txt"; }
has "$SS" "not run: the deadline is spent" && ok "deadline: late steps not run" || { bad "deadline not applied"; cat "$W/short.txt"; }

finish
