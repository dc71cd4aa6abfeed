#!/usr/bin/env bash
# Optimizer offload (none | cpu | nvme): bit-identical losses and parameters
# for world sizes 1 and 2, ZeRO 1 and 3; the compute-side optimizer arena is
# empty under cpu offload and the host arena holds 12 bytes per parameter of
# the shard; under nvme the host bytes stay within the configured budget.
source "${SL_SRC:?}/tests/lib/run.sh" offload mpi numpy
mkdir -p "$W/nvme"
tiny_model "$W/model" llama '"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "rope_theta": null'
tiny_data "$W/data"
BUDGET_MB=1
for np in 1 2; do
  for z in 1 3; do
    for tier in none cpu nvme; do
      name=w${np}z${z}$tier
      $MPI -np $np "$B" train --model "$W/model" --init random --data "$W/data" --data-order sequential --steps 20 \
        --micro-batch 2 --seq-len 16 --threads 1 --zero $z --offload-optimizer $tier --nvme-path "$W/nvme" \
        --offload-budget-mb $BUDGET_MB --summary false --plot false --out-dir "$W/$name" --save "$W/$name/model" \
        > "$W/$name.log" 2>&1 || { bad "run $name"; tail -5 "$W/$name.log"; continue; }
      [ $tier = none ] && continue
      if $CMP "$W/$name" "$W/w${np}z${z}none" --exact; then pass=$((pass+1)); else fail=$((fail+1)); fi
    done
    # memory: last metrics line of each tier
    r=$("$PY" - "$W" $np $z $BUDGET_MB <<'PY'
import json, sys
w, np_, z, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
last = lambda t: [json.loads(l) for l in open(f"{w}/w{np_}z{z}{t}/metrics.jsonl")][-1]["arena_peak"]
none, cpu, nvme = last("none"), last("cpu"), last("nvme")
out = []
out.append(("cpu: optim arena empty", cpu["optim"] == 0, f"optim {cpu['optim']}"))
out.append(("cpu: host arena = none's optim arena (12 B/param of the shard)",
            cpu["host_optim"] == none["optim"], f"host_optim {cpu['host_optim']} vs {none['optim']}"))
out.append(("nvme: optim arena empty", nvme["optim"] == 0, f"optim {nvme['optim']}"))
out.append(("nvme: host bytes within the budget", 0 < nvme["host_optim"] <= budget << 20,
            f"host_optim {nvme['host_optim']} <= {budget << 20} (state {none['optim']} bytes)"))
for name, good, detail in out:
    print(("ok   " if good else "FAIL ") + f"world {np_} ZeRO-{z} {name}: {detail}")
PY
)
    echo "$r"
    pass=$((pass + $(echo "$r" | grep -c '^ok'))); fail=$((fail + $(echo "$r" | grep -c '^FAIL')))
  done
done
finish
