# tests/lib/pp_common.sh — sourced by the pipeline tests (test_pp_parity.sh,
# test_pp_zb1p.sh): tests/lib/parity.sh (work dir, run / check / ok / bad,
# the pass / fail counters, pp_counters) with its tiny models plus Mistral,
# and the helpers counters / metric / refuse. Exits 77 when the CLI, numpy
# or mpirun is missing. Env: SL_BUILD, SL_SRC.
# shellcheck source=tests/lib/parity.sh
source "${SL_SRC:?}/tests/lib/parity.sh" pp
tiny_models # llama, tied, mamba, data
tiny_model "$W/mistral" mistral
# counters: each rank's logged PP sends/receives (4 steps) = 4 x the builder's figures
counters() { # name P m schedule [V]
  local name=$1 P=$2 m=$3 sched=$4 V=${5:-1}
  local vflag=()
  [ "$V" -gt 1 ] && vflag=(--pp-virtual "$V")
  pp_counters "$name" 4 --pp "$P" --micro-batches "$m" --pp-schedule "$sched" "${vflag[@]}" --bytes $((2 * 16 * 32 * 4))
}
metric() { /usr/bin/python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())$2)" "$W/$1/metrics.jsonl"; }
refuse() { # name needle flags... (a later --model wins)
  local name=$1 needle=$2; shift 2
  timeout 60 $MPI -np 2 "$B" train --model "$W/llama" --init random --data "$W/data" --steps 1 --seq-len 16 --micro-batch 1 \
    --threads 1 --out-dir "$W/$name" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$W/$name.log"; then ok "refused $name: $(grep -F -- "$needle" "$W/$name.log" | head -1 | cut -c1-160)"
  else bad "refusal $name: exit $rc, expected 2 with '$needle'"; tail -3 "$W/$name.log"; fi
}
