# tests/lib/pp_common.sh — sourced by the pipeline tests (test_pp_parity.sh,
# test_pp_zb1p.sh): a work dir, the tiny models (llama, tied, mistral, mamba)
# and their data, and the helpers run / check / counters / metric / refuse
# with the pass / fail counters. Exits 77 when the CLI, numpy or mpirun is
# missing. Env: SL_BUILD, SL_SRC.
set -u
B=${SL_BUILD:?}/shardlm
[ -x "$B" ] || exit 77
/usr/bin/python3 -c "import numpy" 2>/dev/null || exit 77
command -v mpirun > /dev/null || exit 77
W=$(mktemp -d /tmp/sl-pp.XXXXXX)
trap 'rm -rf "$W"' EXIT
CMP="/usr/bin/python3 ${SL_SRC:?}/tests/lib/compare.py"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
mkdir -p "$W/llama" "$W/tied" "$W/mistral" "$W/mamba"
cat > "$W/llama/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
 "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
J
sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$W/llama/config.json" > "$W/tied/config.json"
cat > "$W/mistral/config.json" <<'J'
{"architectures": ["MistralForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
 "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 6,
 "tie_word_embeddings": false}
J
cat > "$W/mamba/config.json" <<'J'
{"architectures": ["MambaForCausalLM"], "hidden_size": 32, "num_hidden_layers": 3,
 "state_size": 8, "expand": 2, "conv_kernel": 4, "time_step_rank": 4, "vocab_size": 300,
 "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true}
J
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data" > /dev/null || exit 1
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
run() { # model name world accum [flags...]
  local model=$1 name=$2 np=$3 ga=$4; shift 4
  timeout 120 $MPI -np "$np" "$B" train --model "$W/$model" --data "$W/data" --data-order sequential \
     --steps 4 --seq-len 16 --micro-batch 2 --grad-accum "$ga" --lr 1e-3 --warmup 1 --clip 0.5 --threads 1 \
     --summary false --plot false --log-every 100 --out-dir "$W/$name" --save "$W/$name/model" "$@" \
     > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "run $name (exit $rc)"; tail -5 "$W/$name.log"; return 1; fi
}
check() { # a b [--exact | --rtol X]
  if $CMP "$W/$1" "$W/$2" "${@:3}"; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
# counters: each rank's logged PP sends/receives (4 steps) = 4 x the builder's figures
counters() { # name P m schedule [V]
  local name=$1 P=$2 m=$3 sched=$4 V=${5:-1} vflag=""
  [ "$V" -gt 1 ] && vflag="--pp-virtual $V"
  "$B" pp-schedule --pp "$P" --micro-batches "$m" --pp-schedule "$sched" $vflag --bytes $((2 * 16 * 32 * 4)) --json \
    > "$W/$name.json" || { bad "pp-schedule $name"; return; }
  if /usr/bin/python3 - "$W/$name.json" "$W/$name.log" 4 <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1])); steps = int(sys.argv[3])
got = {}
for line in open(sys.argv[2]):
    m = re.search(r"pipeline rank (\d+): (\d+) sends \((\d+) bytes\), (\d+) receives \((\d+) bytes\)", line)
    if m: got[int(m.group(1))] = tuple(int(x) for x in m.groups()[1:])
bad = 0
for r, f in enumerate(j["ranks"]):
    want = (f["sends"] * steps, f["send_bytes"] * steps, f["recvs"] * steps, f["recv_bytes"] * steps)
    if got.get(r) != want:
        print("rank %d: counters %s, schedule %s" % (r, got.get(r), want)); bad = 1
sys.exit(bad)
PY
  then ok "counters $name equal the schedule's"; else bad "counters $name"; fi
}
metric() { /usr/bin/python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())$2)" "$W/$1/metrics.jsonl"; }
refuse() { # name needle flags... (a later --model wins)
  local name=$1 needle=$2; shift 2
  timeout 60 $MPI -np 2 "$B" train --model "$W/llama" --data "$W/data" --steps 1 --seq-len 16 --micro-batch 1 \
    --threads 1 --out-dir "$W/$name" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/$name.log"; then ok "refused $name: $(grep -F -- "$needle" "$W/$name.log" | head -1 | cut -c1-160)"
  else bad "refusal $name: exit $rc, expected 2 with '$needle'"; tail -3 "$W/$name.log"; fi
}
