# tests/lib/harden.sh — sourced by the failure-case tests (tests/cli/reliability/
# test_harden_*.sh): the shared helper tests/lib/run.sh (W, B, MPI, ok / bad /
# rc_is / finish) with a tiny Llama (hidden 32, 1 layer, vocab 300) and a
# byte-level dataset in $W, the shardlm command lines for them (TRAIN, MPI2),
# check, small_fs and readers of safetensors and metrics files.
# shellcheck source=tests/lib/run.sh
source "${SL_SRC:?}/tests/lib/run.sh" harden
CLI=$B
MNT=""
on_exit '[ -n "$MNT" ] && umount "$MNT" 2>/dev/null'
# HARDEN_CFG: the overrides of $W/model (a test derives a sibling from them)
HARDEN_CFG='"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 1, "max_position_embeddings": 64, "initializer_range": 0.02'
tiny_model "$W/model" llama "$HARDEN_CFG"
tiny_data "$W/data" 4000
# TRAIN: one rank; MPI2: two ranks under mpirun (empty when mpirun is missing); --init random: $W/model has
# no weights (a test that trains from saved weights adds --init hf after them)
ARGS="--model $W/model --init random --data $W/data --seq-len 16 --micro-batch 2 --threads 1 --peak-tflops 1 --warmup 2
 --summary false --plot false"
TRAIN="$CLI train $ARGS"
MPI2=""
command -v mpirun > /dev/null && MPI2="$MPI -np 2 $CLI train $ARGS"
# check NAME COND...: ok when the command COND succeeds
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
# small_fs DIR KB: a tmpfs of KB KiB at DIR (root only); returns 1 when it cannot
small_fs() {
  mkdir -p "$1"
  mount -t tmpfs -o size="$2"k tmpfs "$1" 2> /dev/null || return 1
  MNT=$1
}
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
