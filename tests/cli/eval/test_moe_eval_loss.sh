#!/bin/bash
# tests/cli/eval/test_moe_eval_loss.sh — issue 43 item 1: the held-out loss
# of a mixture of experts is the token cross-entropy, without the router
# losses (the load-balancing aux loss of output_router_logits, the z-loss of
# --moe-z-loss-coef), which are training terms. The logged eval_loss is the
# same at 1 rank (2 micro-batches) and 2 ranks (1 each: the same training
# run), the same as `shardlm eval` of the saved model at 1 and 2 ranks, at
# --ep 2 and --tp 2, and as the token cross-entropy (`shardlm eval` of the
# model with output_router_logits false). 5 windows of 2 per micro-batch:
# the rounds' padding rows (1 at 1 rank, 3 at 2) add nothing. Before the fix
# every eval added the router terms (and the padding rows their share):
# 6.88 at 1 rank, 7.30 at 2, token cross-entropy 5.67.
source "${SL_SRC:?}/tests/lib/run.sh" moe_eval_loss mpi
MOE='"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/aux" llama "$MOE"', "output_router_logits": true, "router_aux_loss_coef": 0.5'
tiny_model "$W/plain" llama "$MOE"
tiny_data "$W/data" 20000
tail -c 3000 "$SL_SRC/configs/corpus.txt" > "$W/held.txt"
"$B" prepare --input "$W/held.txt" --output "$W/held" > /dev/null 2>&1 || bad "prepare the held-out set"
A="--init random --data $W/data --seq-len 16 --micro-batch 2 --threads 1 --summary false --plot false --steps 3 --eval-every 3
 --eval-data $W/held --eval-samples 5"
E="--data $W/held --seq-len 16 --micro-batch 2 --threads 1 --max-samples 5 --json"
# eval_loss DIR: the last eval_loss of DIR/metrics.jsonl; metric DIR KEY: step 3's KEY
eval_loss() { "$PY" -c 'import json,sys; print([json.loads(l)["eval_loss"] for l in open(sys.argv[1]) if "eval_loss" in l][-1])' "$1/metrics.jsonl"; }
metric() { "$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1].get(sys.argv[2]))' "$1/metrics.jsonl" "$2"; }
# ev NP MODEL [FLAGS]: `shardlm eval`'s loss on NP ranks
ev() {
  local np=$1 m=$2
  shift 2
  $MPI -np "$np" "$B" eval --model "$m" $E "$@" 2>> "$W/ev.err" |
    "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["loss"])' 2>> "$W/ev.err" ||
    echo "none (see $W/ev.err)"
}
# same NAME A B [RTOL]: A == B (as printed; RTOL: relative)
same() {
  if "$PY" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); r = float(sys.argv[3]); sys.exit(0 if (a == b if r == 0 else abs(a - b) <= r * abs(b)) else 1)' "$2" "$3" "${4:-0}" 2> /dev/null; then
    ok "$1 ($2 = $3)"
  else bad "$1 ($2 vs $3)"; fi
}

for c in "aux" "z --moe-z-loss-coef 1"; do
  set -- $c
  n=$1
  shift
  m=$W/aux
  [ "$n" = z ] && m=$W/plain
  $MPI -np 1 "$B" train --model "$m" $A --grad-accum 2 --out-dir "$W/$n-1" --save "$W/$n-1/model" "$@" > "$W/$n-1.log" 2>&1 \
    || { bad "$n: 1-rank run"; tail -5 "$W/$n-1.log"; }
  $MPI -np 2 "$B" train --model "$m" $A --out-dir "$W/$n-2" --save "$W/$n-2/model" "$@" > "$W/$n-2.log" 2>&1 \
    || { bad "$n: 2-rank run"; tail -5 "$W/$n-2.log"; }
  l1=$(eval_loss "$W/$n-1")
  same "$n: logged eval_loss, 1 rank x 2 micro-batches = 2 ranks" "$l1" "$(eval_loss "$W/$n-2")"
  same "$n: = shardlm eval of the saved model, 1 rank" "$l1" "$(ev 1 "$W/$n-1/model" "$@")"
  same "$n: = shardlm eval, 2 ranks" "$l1" "$(ev 2 "$W/$n-1/model" "$@")"
  same "$n: = shardlm eval, --ep 2" "$l1" "$(ev 2 "$W/$n-1/model" --ep 2 "$@")" 1e-5
  same "$n: = shardlm eval, --tp 2" "$l1" "$(ev 2 "$W/$n-1/model" --tp 2 "$@")" 1e-5
  # the token cross-entropy: the same weights with the router loss switched off in config.json
  mkdir -p "$W/$n-ce"
  cp "$W/$n-1/model/"* "$W/$n-ce/"
  sed -i 's/"output_router_logits": true/"output_router_logits": false/' "$W/$n-ce/config.json"
  same "$n: = the token cross-entropy (no router loss)" "$l1" "$(ev 1 "$W/$n-ce")"
done
# the control: the router terms the checks above leave out are far above their tolerance, and
# the training metrics still report them (without the coefficient)
a=$(metric "$W/aux-1" moe_aux_loss) z=$(metric "$W/z-1" moe_z_loss)
if "$PY" -c 'import sys; sys.exit(0 if 0.5 * float(sys.argv[1]) > 0.1 and float(sys.argv[2]) > 0.1 else 1)' "$a" "$z" 2> /dev/null; then
  ok "the training metrics report the router terms: moe_aux_loss $a (x 0.5), moe_z_loss $z (x 1)"
else bad "the training metrics' router terms: moe_aux_loss $a, moe_z_loss $z"; fi
finish
