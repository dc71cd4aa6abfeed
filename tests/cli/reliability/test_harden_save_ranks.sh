#!/bin/bash
# tests/cli/reliability/test_harden_save_ranks.sh — issue 27 case 1: a multi-rank `--save`
# that fails on rank 0 (a full disk) ends every rank within seconds, exit 1,
# each rank naming the directory and the real error ("No space left on
# device"), and the old directory stays bit-identical. Before, rank 0 stopped
# entering the per-unit gathers at the first failed write while the others
# waited in them until --comm-timeout (exit 3, the error never printed).
# Plain DP, --tp 2, --pp 2 and TP 2 x PP 2, with --comm-timeout 60: each
# must end in under 20 s. Needs root (a tmpfs) and mpirun, else skips (77).
source "${SL_SRC:?}/tests/lib/harden.sh"
[ -n "$MPI2" ] || skip "no mpirun"
small_fs "$W/fs" 1200 || skip "cannot mount a tmpfs (not root)"
tiny_model "$W/m2" llama '"model_type": "llama", "num_attention_heads": 2, "num_hidden_layers": 2,
 "max_position_embeddings": 64'
A=(train --model "$W/m2" --init random --data "$W/data" --seq-len 16 --micro-batch 2 --grad-accum 2 --threads 1 --peak-tflops 1
   --summary false --plot false --comm-timeout 60)
sums() { (cd "$1" && md5sum $(ls | sort)); }
"$CLI" "${A[@]}" --steps 1 --out-dir "$W/o0" --save "$W/fs/model" > "$W/first.log" 2>&1
rc_is "first save (fits)" $? 0 "$W/first.log"
before=$(sums "$W/fs/model")
# fill the rest of the tmpfs: the next save cannot fit. "cfg": nothing
# fits (the write of config.json fails, before any gather); "wts": 16 KiB
# free, so config.json fits and the tensors' file fails part-way (rank 0
# has gathered some units and not the rest)
dd if=/dev/zero of="$W/fs/filler" bs=4k 2> /dev/null
for layout in "dp:2" "tp:2:--tp 2" "pp:2:--pp 2" "tppp:4:--tp 2 --pp 2" \
              "wts_dp:2" "wts_tp:2:--tp 2" "wts_pp:2:--pp 2" "wts_tppp:4:--tp 2 --pp 2"; do
  IFS=: read -r name np flags <<< "$layout"
  case $name in wts_dp) truncate -s -16K "$W/fs/filler";; esac
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout 120 $MPI -np "$np" "$CLI" "${A[@]}" $flags --steps 2 --out-dir "$W/o_$name" --save "$W/fs/model" \
    > "$W/$name.log" 2>&1
  rc=$? dt=$(($(date +%s) - t0))
  rc_is "$name: failed save at -np $np ${flags:-(plain DP)}" $rc 1 "$W/$name.log" "No space left on device"
  if [ "$dt" -lt 20 ]; then ok "$name: every rank ended in ${dt} s (--comm-timeout 60)"
  else bad "$name: took ${dt} s: a rank waited for the watchdog"; fi
  n=$(grep -c "No space left on device" "$W/$name.log")
  named=$(grep -c "fs/model" "$W/$name.log")
  if [ "$n" -ge "$np" ] && [ "$named" -ge "$np" ]; then ok "$name: all $np ranks name the directory and the error"
  else bad "$name: $n of $np ranks print the error, $named name the directory"; sed 's/^/     /' "$W/$name.log" | tail -8; fi
  if [ "$(sums "$W/fs/model")" = "$before" ] && [ -z "$(ls -A "$W/fs" | grep -v '^model$\|^filler$')" ]; then
    ok "$name: the old directory is bit-identical, no temporary left"
  else bad "$name: the old directory changed or a temporary is left: $(ls -A "$W/fs")"; fi
done
finish
