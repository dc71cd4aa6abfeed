# shellcheck shell=bash
# tests/lib/parity.sh NAME — sourced by a multi-rank parity test: the shared
# helper tests/lib/run.sh (B, W, MPI, CMP, ok / bad / finish, tiny_model;
# skips without numpy or mpirun) and
#   tiny_models          $W/llama (hidden 32, 4 layers, vocab 300, untied),
#                        $W/tied (the same, tied), $W/mamba (3 layers, tied)
#                        and $W/data (the repository's corpus);
#   run MODEL NAME NP ACCUM [FLAGS]  4 steps of seq 16 x micro-batch 2 on NP
#                        ranks into $W/NAME (metrics, --save model), the log
#                        in $W/NAME.log; $RUN_FLAGS added to every run;
#   check A B [FLAGS]    compare.py on runs $W/A and $W/B (losses, weights);
#   planted A B RTOL     the negative control: errors planted into A fail;
#   pp_counters NAME STEPS [pp-schedule flags]  the PP counter lines of
#                        $W/NAME.log against `shardlm pp-schedule --json`
#                        (written to $W/NAME.json) x STEPS.
# shellcheck source=tests/lib/run.sh
source "${SL_SRC:?}/tests/lib/run.sh" "$1" mpi numpy
check() { # a b [--exact | --rtol X]
  if $CMP "$W/$1" "$W/$2" "${@:3}"; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
planted() { # a b rtol: the negative control, compare.py --plant norm and row must FAIL
  local k
  for k in norm row; do
    if $CMP "$W/$1" "$W/$2" --rtol "$3" --plant $k > "$W/planted.out"; then
      bad "planted $k error in $1 passed the $3 comparison with $2: the tolerance cannot catch it"
    else ok "planted $k error in $1 fails the $3 comparison with $2 ($(grep -o 'worst param diff [^ ]*' "$W/planted.out"))"; fi
  done
}
pp_counters() { # name steps pp-schedule-flags...
  local name=$1 steps=$2; shift 2
  "$B" pp-schedule "$@" --json > "$W/$name.json" || { bad "pp-schedule $name"; return; }
  if /usr/bin/python3 "$SL_SRC/tests/lib/pp_counters.py" "$W/$name.json" "$W/$name.log" "$steps"; then
    ok "counters $name equal the schedule's ($*)"
  else bad "counters $name ($*)"; fi
}
tiny_models() {
  tiny_model "$W/llama" llama
  tiny_model "$W/tied" tied
  tiny_model "$W/mamba" mamba
  tiny_data "$W/data"
}
RUN_FLAGS="" # the sourcing test sets it
run() { # model name world accum [flags...]
  local model=$1 name=$2 np=$3 ga=$4; shift 4
  # shellcheck disable=SC2086
  timeout 120 $MPI -np "$np" "$B" train --model "$W/$model" --init random --data "$W/data" --data-order sequential \
     --steps 4 --seq-len 16 --micro-batch 2 --grad-accum "$ga" --lr 1e-3 --warmup 1 --clip 0.5 --threads 1 \
     --summary false --plot false --log-every 100 --out-dir "$W/$name" --save "$W/$name/model" $RUN_FLAGS "$@" \
     > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "run $name (exit $rc)"; tail -5 "$W/$name.log"; return 1; fi
}
