#!/usr/bin/env bash
# Communication volume and memory of one step against the closed forms of
# the field guide (tests/lib/closed_forms.py), for world sizes 1-4 and
# ZeRO 0-3; ZeRO-3 at world 4 must hold < 30% of ZeRO-0's model-state bytes.
set -u
B=${SL_BUILD:?}/shardlm
[ -x "$B" ] || exit 77
W=$(mktemp -d /tmp/sl-volume.XXXXXX)
trap 'rm -rf "$W"' EXIT
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
mkdir -p "$W/model"
cat > "$W/model/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 20,
 "vocab_size": 300, "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
J
"$B" prepare --input "$SL_SRC/configs/corpus.txt" --output "$W/data" > /dev/null || exit 1
pass=0; fail=0
declare -A state
for np in 1 2 3 4; do
  for z in 0 1 2 3; do
    out="$W/w${np}z$z"
    if ! $MPI -np $np "$B" train --model "$W/model" --data "$W/data" --steps 2 --micro-batch 2 --seq-len 16 \
        --threads 1 --zero $z --summary false --plot false --out-dir "$out" > "$out.log" 2>&1; then
      echo "FAIL run world $np zero $z"; tail -5 "$out.log"; fail=$((fail+1)); continue
    fi
    r=$(/usr/bin/python3 "$SL_SRC/tests/lib/closed_forms.py" "$W/model/config.json" $np $z "$out/metrics.jsonl")
    echo "$r"
    pass=$((pass + $(echo "$r" | grep -c '^ok'))); fail=$((fail + $(echo "$r" | grep -c '^FAIL')))
    state[$np.$z]=$(echo "$r" | sed -n 's/.*model-state bytes \([0-9]*\).*/\1/p')
  done
done
ratio=$(/usr/bin/python3 -c "print(${state[4.3]:-0} / ${state[4.0]:-1})")
if /usr/bin/python3 -c "import sys; sys.exit(0 if $ratio < 0.30 else 1)"; then
  echo "ok   ZeRO-3 at world 4 holds $ratio of ZeRO-0's model-state bytes (< 0.30)"; pass=$((pass+1))
else
  echo "FAIL ZeRO-3 at world 4 holds $ratio of ZeRO-0's model-state bytes (want < 0.30)"; fail=$((fail+1))
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
