#!/usr/bin/env bash
# shardlm bench gpu on the emulated CUDA backend (build/shardlm_emu, tests/cuda_emu)
# with a tiny stack (hidden 64, 2 layers, 4/2 heads, seqs 32,64, 2 steps after
# 2 warmup; docs/cli.md "bench", docs/cuda.md "GPU window"):
#  - one JSON line per sequence length, every field present and finite,
#    tokens/s and the attention / GEMM TFLOP/s > 0 (their values under the
#    emulator mean nothing: only their presence is checked);
#  - arenas_equal true: the engine check's per-arena prediction equals the
#    emulated device run's peaks, and peak_bytes = peak_predicted +
#    scratch_bytes (the CUDA context's bytes, the one arena the engine check
#    does not model; set after each step, so in the sum's high-water from the
#    second step on). Checked again outside the bench: the run's
#    metrics.jsonl against `shardlm plan --engine-check --json` on the same
#    flags, exactly; negative control: the same comparison with
#    --activation-checkpoint none must differ in the acts arena;
#  - --seq N is a one-element list;
#  - a bad --seqs / --seq value: exit 2 naming the flag and the value; a run
#    that fails (build/shardlm without a GPU): exit 1, the log's tail.
source "${SL_SRC:?}/tests/lib/run.sh" emu_bench_gpu
E=$SL_BUILD/shardlm_emu
[ -x "$E" ] || skip "$E is not built (no C++ compiler)"
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
TINY=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --vocab 256 --steps 2 --threads 1)
if "$E" bench gpu "${TINY[@]}" --seqs 32,64 --out-dir "$W/b" > "$W/b.log" 2>&1; then
  ok "bench gpu --seqs 32,64 on the emulator"
else bad "bench gpu on the emulator"; tail -20 "$W/b.log"; fi
grep '^{"bench"' "$W/b.log" > "$W/b.jsonl"

check_lines() { # jsonl seqs...: prints one verdict line per problem, nothing when all hold
  "$PY" - "$@" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
want = [int(s) for s in sys.argv[2:]]
if [o.get("seq") for o in lines] != want:
    print(f"seq of the JSON lines {[o.get('seq') for o in lines]}, want {want}")
num = ["seq", "batch", "layers", "tokens_per_s", "mfu", "attn_tflops", "gemm_tflops", "comm_exposed", "peak_bytes",
       "peak_predicted", "scratch_bytes", "peak_tflops", "mfu_vs_bf16_989"]
for o in lines:
    s = o.get("seq")
    for k in num:
        v = o.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            print(f"seq {s}: {k} missing or not a finite number: {v!r}")
    for k in ("tokens_per_s", "attn_tflops", "gemm_tflops"):
        if not (o.get(k, 0) > 0): print(f"seq {s}: {k} = {o.get(k)}, want > 0")
    if not 0 <= o.get("comm_exposed", -1) <= 1: print(f"seq {s}: comm_exposed {o.get('comm_exposed')} not in [0, 1]")
    if o.get("arenas_equal") is not True or o.get("arenas_differ") != "":
        print(f"seq {s}: arenas_equal {o.get('arenas_equal')}, arenas_differ '{o.get('arenas_differ')}'")
    if o.get("peak_bytes") != o.get("peak_predicted", 0) + o.get("scratch_bytes", 0):
        print(f"seq {s}: peak_bytes {o.get('peak_bytes')} != peak_predicted + scratch_bytes")
    if o.get("scratch_bytes", 0) <= 0: print(f"seq {s}: scratch_bytes {o.get('scratch_bytes')}, want > 0")
    if o.get("precision") != "bf16": print(f"seq {s}: precision {o.get('precision')}")
PY
}
msg=$(check_lines "$W/b.jsonl" 32 64)
[ -z "$msg" ] && ok "two JSON lines, every field finite, TFLOP/s > 0, arenas equal, peak = predicted + scratch" ||
  { bad "JSON lines: $msg"; cat "$W/b.log"; }

# the run's metrics against the CLI's engine check on the same flags (exact), and the negative control
engine_vs_run() { # seq label flags...: exit 0 when every modelled arena and the total (less scratch) agree
  local s=$1 l=$2
  shift 2
  "$B" plan --engine-check --json --model "$W/b/model" --world 1 --zero 3 --micro-batch 1 --seq-len "$s" \
    --grad-accum 1 --compute-dtype bf16 "$@" > "$W/plan-$l.json" 2> "$W/plan-$l.log" || { cat "$W/plan-$l.log"; return 2; }
  "$PY" - "$W/b/s$s/metrics.jsonl" "$W/plan-$l.json" "$W/b.jsonl" "$s" <<'PY'
import json, sys
run = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
plan = json.load(open(sys.argv[2]))
bench = [json.loads(l) for l in open(sys.argv[3]) if json.loads(l)["seq"] == int(sys.argv[4])][0]
bad = [a for a in plan["arena_peak"] if a != "scratch" and plan["arena_peak"][a] != run["arena_peak"][a]]
if plan["peak_bytes"] != run["peak_bytes"] - run["arena_peak"]["scratch"]: bad.append("peak_bytes")
if plan["peak_bytes"] != bench["peak_predicted"]: bad.append("bench peak_predicted")
print(",".join(bad))
sys.exit(1 if bad else 0)
PY
}
for s in 32 64; do
  d=$(engine_vs_run "$s" "s$s" --activation-checkpoint selective) && ok "seq $s: plan --engine-check = the run's arenas" ||
    bad "seq $s: plan --engine-check vs the run differ: $d"
done
d=$(engine_vs_run 32 neg --activation-checkpoint none)
[ $? -eq 1 ] && echo "$d" | grep -q acts && ok "negative control: --activation-checkpoint none differs ($d)" ||
  bad "negative control: a prediction without checkpointing matches the run ($d)"

if "$E" bench gpu "${TINY[@]}" --layers 1 --steps 1 --seq 48 --out-dir "$W/one" > "$W/one.log" 2>&1; then
  grep '^{"bench"' "$W/one.log" > "$W/one.jsonl"
  msg=$(check_lines "$W/one.jsonl" 48)
  [ -z "$msg" ] && ok "--seq 48: one JSON line" || bad "--seq 48: $msg"
else bad "bench gpu --seq 48"; tail -20 "$W/one.log"; fi

"$E" bench gpu "${TINY[@]}" --seqs 32,,64 --out-dir "$W/x" > "$W/x1.log" 2>&1
rc_is "--seqs 32,,64" $? 2 "$W/x1.log" "--seqs expects a comma-separated list of at most 8 sequence lengths, integers in [1, 1048576], found '32,,64'"
"$E" bench gpu "${TINY[@]}" --seqs 0 --out-dir "$W/x" > "$W/x2.log" 2>&1
rc_is "--seqs 0" $? 2 "$W/x2.log" "found '0'"
"$E" bench gpu "${TINY[@]}" --seq 32,64 --out-dir "$W/x" > "$W/x3.log" 2>&1
rc_is "--seq 32,64" $? 2 "$W/x3.log" "--seq expects one sequence length, found '32,64'"
[ ! -e "$W/x" ] && ok "a bad flag writes nothing" || bad "a bad flag left $W/x"
if ! { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; }; then
  "$B" bench gpu "${TINY[@]}" --seqs 32 --out-dir "$W/f" > "$W/f.log" 2>&1
  rc_is "a run that fails (no GPU)" $? 1 "$W/f.log" "shardlm bench gpu: the run failed; its log is $W/f/s32/train.log, which ends:"
fi
finish
