# shellcheck shell=bash
# tests/lib/run.sh NAME [NEED...] — the one helper every CLI test sources first:
#
#   source "${SL_SRC:?}/tests/lib/run.sh" NAME mpi numpy
#
# NEED is any of: mpi (mpirun), numpy, torch (python3-torch + numpy), node
# (node + npm); a missing one skips the test (exit 77), which fails under
# SL_REQUIRE_ALL=1 (CI; tests/lib/run_test.sh). The CLI must be built.
# It sets
#   SL_SRC, SL_BUILD     the repository and build directory (exported)
#   B                    the CLI, $SL_BUILD/shardlm;  PY  /usr/bin/python3
#   W                    a fresh work directory /tmp/sl-NAME.XXXXXX, removed
#                        at exit (kept, and named, with SL_KEEP=1)
#   MPI                  mpirun for oversubscribed, unbound CPU ranks
#                        (root allowed); use it as  $MPI -np N CMD...
#   CMP                  tests/lib/compare.py (parity of two runs)
# and defines
#   ok MSG / bad MSG     count and print a result ("ok   ..." / "FAIL ...")
#   finish               print "N passed, M failed" and exit (1 on a failure)
#   skip MSG             print MSG and exit 77
#   on_exit CMD          run CMD (a string) at exit, before $W is removed
#   rc_is NAME RC WANT LOG [NEEDLE]   exit status RC must be WANT and LOG
#                        hold NEEDLE (fixed string); prints the matching line
#   tiny_model DIR KIND [JSON MEMBERS]  DIR/config.json of a tiny model: KIND
#                        llama (hidden 32, 4 layers, 4 heads / 2 kv, vocab
#                        300, untied), tied (the same, tied), mistral (3
#                        layers, window 6) or mamba (3 layers, state 8, tied);
#                        the members override or add keys, null removes one:
#                        tiny_model "$W/m" llama '"num_hidden_layers": 1'
#   tiny_data DIR [BYTES]  `shardlm prepare` of the repository's corpus (its
#                        first BYTES) into DIR
#   arch_run ARCH NAME WORLD MICRO ACCUM [FLAGS]  the parity tests' run:
#                        `shardlm train` of $W/ARCH (--init random) on $W/data (ARCH_STEPS
#                        steps, default 6; sequential order, seq 16, lr 1e-3,
#                        clip 0.5, 1 thread) into $W/ARCH-NAME, saved to
#                        $W/ARCH-NAME/model; a failure counts and shows the log
#   arch_check ARCH A B [COMPARE FLAGS]  $CMP of $W/ARCH-A against $W/ARCH-B,
#                        counted
#   emu_need             E := build/shardlm_emu (the emulated CUDA backend;
#                        skips when not built), ASan without leak reports
#   emu_run NAME NP BIN [FLAGS]  `BIN train $A FLAGS` on NP ranks (mpirun
#                        when NP > 1) into $W/NAME; a failure counts and shows the log
#   emu_check A B [COMPARE FLAGS]  $CMP of $W/A against $W/B, counted
set -u
SL_NAME=$1
shift
SL_SRC=${SL_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SL_BUILD=${SL_BUILD:-$SL_SRC/build}
export SL_SRC SL_BUILD
B=$SL_BUILD/shardlm
PY=/usr/bin/python3
CMP="$PY $SL_SRC/tests/lib/compare.py"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
# containers without cross-memory attach (CMA): shared memory without it
export OMPI_MCA_btl_vader_single_copy_mechanism=none
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
skip() { echo "skipped: $*"; exit 77; }
arch_run() {
  local arch=$1 name=$2 np=$3 mb=$4 ga=$5
  shift 5
  $MPI -np "$np" "$B" train --model "$W/$arch" --init random --data "$W/data" --data-order sequential \
    --steps "${ARCH_STEPS:-6}" --seq-len 16 --lr 1e-3 --warmup 3 --clip 0.5 --weight-decay 0.1 --threads 1 \
    --summary false --plot false --log-every 100 --micro-batch "$mb" --grad-accum "$ga" \
    --out-dir "$W/$arch-$name" --save "$W/$arch-$name/model" "$@" > "$W/$arch-$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    bad "run $arch $name (exit $rc)"
    tail -5 "$W/$arch-$name.log"
    return 1
  fi
}
arch_check() {
  local arch=$1 a=$2 b=$3
  shift 3
  if $CMP "$W/$arch-$a" "$W/$arch-$b" "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
emu_need() {
  E=$SL_BUILD/shardlm_emu
  [ -x "$E" ] || skip "$E is not built (no C++ compiler)"
  # Open MPI's allocations at exit are not ours: no leak report
  export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
}
emu_run() {
  local n=$1 np=$2 bin=$3
  shift 3
  local launch=()
  [ "$np" -gt 1 ] && launch=($MPI -np "$np")
  "${launch[@]}" "$bin" train $A --out-dir "$W/$n" "$@" > "$W/$n.log" 2>&1 ||
    { bad "run $n"; grep -m 3 -iE "shardlm:|error|race" "$W/$n.log"; tail -5 "$W/$n.log"; return 1; }
}
emu_check() {
  if $CMP "$W/$1" "$W/$2" "${@:3}" > "$W/cmp.log" 2>&1; then ok "$1 vs $2 ${*:3}"; else bad "$1 vs $2 ${*:3}"; cat "$W/cmp.log"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
}
[ -x "$B" ] || skip "$B is not built"
for need in "$@"; do
  case $need in
    mpi) command -v mpirun > /dev/null || skip "mpirun is not installed (tools/setup installs openmpi-bin)" ;;
    numpy) "$PY" -c "import numpy" 2> /dev/null || skip "$PY has no numpy (tools/setup installs python3-numpy)" ;;
    torch) "$PY" -c "import torch, numpy" 2> /dev/null || skip "$PY has no torch (tools/setup installs python3-torch)" ;;
    node) command -v node > /dev/null && command -v npm > /dev/null || skip "node / npm are not installed (tools/setup)" ;;
    *) echo "tests/lib/run.sh: unknown need '$need'" >&2; exit 1 ;;
  esac
done
W=$(mktemp -d "${TMPDIR:-/tmp}/sl-$SL_NAME.XXXXXX")
SL_ON_EXIT=""
on_exit() { SL_ON_EXIT="$SL_ON_EXIT
$1"; }
sl_cleanup() {
  eval "$SL_ON_EXIT"
  if [ "${SL_KEEP:-0}" = 1 ]; then echo "work directory kept: $W"; else rm -rf "$W"; fi
}
trap sl_cleanup EXIT
rc_is() {
  local n=$1 rc=$2 want=$3 log=$4 needle=${5:-}
  if [ "$rc" -ne "$want" ]; then bad "$n: exit $rc, expected $want"; sed 's/^/     /' "$log" | tail -n 5; return; fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" "$log"; then bad "$n: no '$needle' in the output"; sed 's/^/     /' "$log" | tail -n 5; return; fi
  ok "$n (exit $rc)"
  [ -n "$needle" ] && grep -F -- "$needle" "$log" | head -n 1 | cut -c1-200 | sed "s|$W/||g; s|^|     |"
  return 0
}
tiny_model() {
  mkdir -p "$1"
  "$PY" - "$1/config.json" "$2" "${3:-}" << 'P' || { echo "tiny_model $1 $2: bad arguments" >&2; exit 1; }
import json, sys
llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
         "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
kinds = {
    "llama": llama,
    "tied": dict(llama, tie_word_embeddings=True),
    "mistral": dict(llama, architectures=["MistralForCausalLM"], num_hidden_layers=3, sliding_window=6),
    "mamba": {"architectures": ["MambaForCausalLM"], "hidden_size": 32, "num_hidden_layers": 3,
              "state_size": 8, "expand": 2, "conv_kernel": 4, "time_step_rank": 4, "vocab_size": 300,
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
    # Nemotron-H with MoE layers (M*E-E: Mamba-2, attention, the sigmoid-routed relu^2 experts with the shared
    # expert, a dense MLP)
    "nemotron_moe": {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 32,
                     "vocab_size": 300, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False, "conv_kernel": 4,
                     "hybrid_override_pattern": "M*E-E", "intermediate_size": 48, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8,
                     "n_groups": 2, "ssm_state_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
                     "moe_intermediate_size": 24, "moe_shared_expert_intermediate_size": 40,
                     "routed_scaling_factor": 2.5},
    # Granite 4.0-H with experts (mamba / attention / mamba, each HF layer's MLP half the shared SwiGLU MLP plus 4
    # fused SwiGLU experts top-2), the muP multipliers != 1
    "granite_moe": {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
                    "hidden_size": 32, "vocab_size": 300, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                    "layer_types": ["mamba", "attention", "mamba"], "num_hidden_layers": 3,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "shared_intermediate_size": 40,
                    "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2,
                    "position_embedding_type": "nope", "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_n_groups": 1,
                    "mamba_d_state": 8, "mamba_chunk_size": 8, "embedding_multiplier": 3.0,
                    "residual_multiplier": 0.5, "attention_multiplier": 0.2, "logits_scaling": 2.5},
}
c = dict(kinds[sys.argv[2]])
for k, v in json.loads("{" + sys.argv[3] + "}").items():
    if v is None:
        c.pop(k, None)
    else:
        c[k] = v
json.dump(c, open(sys.argv[1], "w"), indent=1)
P
}
tiny_data() {
  local src=$SL_SRC/configs/corpus.txt
  if [ -n "${2:-}" ]; then
    head -c "$2" "$src" > "$W/.corpus.$$"
    src=$W/.corpus.$$
  fi
  "$B" prepare --input "$src" --output "$1" > "$W/.prepare.log" 2>&1 || { echo "prepare $1 failed:"; cat "$W/.prepare.log"; exit 1; }
}
