#!/usr/bin/env bash
# Communication volume and memory of one step against the closed forms of
# the field guide (tests/lib/closed_forms.py), for world sizes 1-4 and
# ZeRO 0-3; ZeRO-3 at world 4 must hold < 30% of ZeRO-0's model-state bytes.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_volume mpi
tiny_model "$W/model" llama '"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 20, "rope_theta": null'
tiny_data "$W/data"
declare -A state
for np in 1 2 3 4; do
  for z in 0 1 2 3; do
    out="$W/w${np}z$z"
    if ! $MPI -np $np "$B" train --model "$W/model" --init random --data "$W/data" --steps 2 --micro-batch 2 --seq-len 16 \
        --threads 1 --zero $z --summary false --plot false --out-dir "$out" > "$out.log" 2>&1; then
      bad "run world $np zero $z"; tail -5 "$out.log"; continue
    fi
    r=$("$PY" "$SL_SRC/tests/lib/closed_forms.py" "$W/model/config.json" $np $z "$out/metrics.jsonl")
    echo "$r"
    pass=$((pass + $(echo "$r" | grep -c '^ok'))); fail=$((fail + $(echo "$r" | grep -c '^FAIL')))
    state[$np.$z]=$(echo "$r" | sed -n 's/.*model-state bytes \([0-9]*\).*/\1/p')
  done
done
# a missing figure (a failed run) fails this check too, not only the run's
ratio=$("$PY" -c "print(${state[4.3]:-0} / ${state[4.0]:-0})" 2> /dev/null || echo missing)
if [ -n "${state[4.3]:-}" ] && [ "$ratio" != missing ] && "$PY" -c "import sys; sys.exit(0 if $ratio < 0.30 else 1)"; then
  ok "ZeRO-3 at world 4 holds $ratio of ZeRO-0's model-state bytes (< 0.30)"
else
  bad "ZeRO-3 at world 4 holds $ratio of ZeRO-0's model-state bytes (want < 0.30)"
fi
finish
