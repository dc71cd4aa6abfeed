# tests/lib/harden.sh — sourced by tests/test_harden_*.sh: a tiny Llama
# (hidden 32, 1 layer, vocab 300) and byte-level dataset in $W, the shardlm
# command line for them, and pass/fail bookkeeping ending in "N passed, M failed".
set -u
: "${SL_BUILD:?}" "${SL_SRC:?}"
CLI=$SL_BUILD/shardlm
[ -x "$CLI" ] || { echo "skip: $CLI is not built"; exit 77; }
W=$(mktemp -d "${TMPDIR:-/tmp}/sl_harden.XXXXXX")
MNT=""
cleanup() { [ -n "$MNT" ] && umount "$MNT" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/model"
cat > "$W/model/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
 "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 300,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "max_position_embeddings": 64,
 "initializer_range": 0.02}
J
head -c 4000 "$SL_SRC/configs/corpus.txt" > "$W/corpus.txt"
"$CLI" prepare --input "$W/corpus.txt" --output "$W/data" > /dev/null || { echo "prepare failed"; exit 1; }
# TRAIN: one rank; MPI2: two ranks under mpirun (empty when mpirun is missing)
ARGS="--model $W/model --data $W/data --seq-len 16 --micro-batch 2 --threads 1 --peak-tflops 1 --warmup 2
 --summary false --plot false"
TRAIN="$CLI train $ARGS"
MPI2=""
command -v mpirun > /dev/null && MPI2="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 $CLI train $ARGS"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# check NAME COND...: ok when the command COND succeeds
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
# rc_is NAME RC WANT LOG [NEEDLE]: exit status and (optionally) a message
rc_is() {
  local n=$1 rc=$2 want=$3 log=$4 needle=${5:-}
  if [ "$rc" -ne "$want" ]; then bad "$n: exit $rc, expected $want"; sed 's/^/     /' "$log" | tail -n 5; return; fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" "$log"; then bad "$n: no '$needle' in the output"; sed 's/^/     /' "$log" | tail -n 5; return; fi
  ok "$n (exit $rc)"
  [ -n "$needle" ] && grep -F -- "$needle" "$log" | head -n 1 | cut -c1-200 | sed "s|$W/||g; s|^|     |"
  return 0
}
# small_fs DIR KB: a tmpfs of KB KiB at DIR (root only); returns 1 when it cannot
small_fs() {
  mkdir -p "$1"
  mount -t tmpfs -o size="$2"k tmpfs "$1" 2> /dev/null || return 1
  MNT=$1
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
}
PY=/usr/bin/python3
# st_finite FILE.safetensors: every F32 value finite (independent reader)
st_finite() {
  "$PY" - "$1" <<'P'
import array, json, math, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for k, t in h.items():
    if k == "__metadata__": continue
    lo, hi = t["data_offsets"]
    a = array.array("f", b[8 + n + lo:8 + n + hi])
    if not all(math.isfinite(x) for x in a): print(f"{sys.argv[1]}: {k} holds non-finite values"); sys.exit(1)
P
}
# jsonl_strict FILE: every line parses as strict JSON (no NaN / Infinity)
jsonl_strict() {
  "$PY" -c '
import json, sys
def no(c): raise ValueError("non-JSON constant " + c)
for i, l in enumerate(open(sys.argv[1]), 1):
    json.loads(l, parse_constant=no)
' "$1"
}
# jfield FILE STEP KEY: the value of KEY in the line of STEP ("None" for null)
jfield() { "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get("step") == int(sys.argv[2]): print(j.get(sys.argv[3]))
' "$1" "$2" "$3"; }
# steps FILE: the step numbers of the lines, space-separated
steps() { "$PY" -c 'import json, sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$1"; }
