#!/bin/bash
# tests/cli/reliability/test_harden_check_minor.sh — issue 11 case 12 (minor): resuming past
# --steps says so; `convert --from-hf --to-ckpt` into a directory holding
# checkpoints is refused and `latest` stays; bad output paths exit 2 before
# training; NVMe optimizer files a crash left behind are removed on the next
# start of the same run (another run's files stay); `plan --gpus 99999999999`
# and `--efficiency nan` exit 2.
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_minor
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
check() { expect "$@"; }
tiny_config "$W/m" '"rope_theta": 10000.0'
tiny_data "$W/data"
RUN="$B train --model $W/m --init random --data $W/data --micro-batch 1 --seq-len 8 --threads 1 --summary false --plot false"
# resuming past --steps
check "train 3 steps with checkpoints" 0 "" $RUN --steps 3 --ckpt-dir "$W/ck" --out-dir "$W/o1" --save "$W/hf"
check "resume with --steps 2 < 3 done" 0 "nothing to train" $RUN --steps 2 --ckpt-dir "$W/ck" --resume --out-dir "$W/o1"
grep -q "0.0000 -> 0.0000" "$W/log$k" && no "resume past --steps still prints a zero-loss summary" "$W/log$k"
# convert into a directory with checkpoints: refused, latest unchanged
before=$(cat "$W/ck/latest" 2>/dev/null)
check "convert --to-ckpt into a checkpoint directory" 2 "already holds" "$B" convert --from-hf "$W/hf" --to-ckpt "$W/ck"
[ "$(cat "$W/ck/latest" 2>/dev/null)" = "$before" ] && [ -n "$before" ] && ok "latest unchanged ($before)" || no "latest moved"
check "convert --to-ckpt into a new directory" 0 "" "$B" convert --from-hf "$W/hf" --to-ckpt "$W/ck_new"
# bad output paths: exit 2 before training
touch "$W/afile"
check "--out-dir under a file" 2 "--out-dir" $RUN --steps 1 --out-dir "$W/afile/x"
check "--metrics under a file" 2 "--metrics" $RUN --steps 1 --out-dir "$W/o2" --metrics "$W/afile/m.jsonl"
check "--ckpt-dir under a file" 2 "--ckpt-dir" $RUN --steps 1 --out-dir "$W/o2" --ckpt-dir "$W/afile/ck"
check "--save under a file" 2 "--save" $RUN --steps 1 --out-dir "$W/o2" --save "$W/afile/model"
check "--nvme-path missing" 2 "--nvme-path" $RUN --steps 1 --out-dir "$W/o2" --offload-optimizer nvme --nvme-path "$W/none"
check "convert --to-hf under a file" 2 "--to-hf" "$B" convert --from-ckpt "$W/ck" --model-config "$W/m" --to-hf "$W/afile/hf"
check "convert --to-ckpt under a file" 2 "--to-ckpt" "$B" convert --from-hf "$W/hf" --to-ckpt "$W/afile/ck"
check "plot into a path under a file" 2 "afile" "$B" plot "$W/o1/metrics.jsonl" "$W/afile/m.svg"
check "--metrics in a new directory" 0 "" $RUN --steps 1 --out-dir "$W/o2" --metrics "$W/newdir/m.jsonl"
# NVMe leftovers: a 2-rank run killed mid-training, restarted on 1 rank
if command -v mpirun > /dev/null; then
  mkdir -p "$W/nv"
  touch "$W/nv/optstate-0badf00d-r0-u0" # another run's file
  NV="--offload-optimizer nvme --nvme-path $W/nv --out-dir $W/o3"
  $MPI -np 2 $RUN $NV --steps 1000000 > "$W/crash.log" 2>&1 &
  mp=$!
  for i in $(seq 1 100); do [ "$(ls "$W/nv" | grep -c -- '-r1-u')" -ge 1 ] && break; sleep 0.2; done
  sleep 1
  for c in $(pgrep -P $mp); do kill -9 "$c" 2> /dev/null; done
  wait $mp 2> /dev/null
  n1=$(ls "$W/nv" | grep -c -- '-r1-u')
  if [ "$n1" -ge 1 ]; then ok "crash left $n1 rank-1 optimizer files"; else no "no rank-1 files after the crash" "$W/crash.log"; fi
  check "restart the same run on 1 rank" 0 "removed" $RUN $NV --steps 1
  left=$(ls "$W/nv" | grep -v 0badf00d | wc -l)
  [ "$left" -eq 0 ] && ok "leftovers removed" || no "$left optimizer files left: $(ls "$W/nv" | tr '\n' ' ')"
  [ -e "$W/nv/optstate-0badf00d-r0-u0" ] && ok "another run's file kept" || no "another run's file was removed"
fi
# plan
check "plan --gpus 99999999999" 2 "--gpus" "$B" plan --model "$W/m" --gpus 99999999999 --gpu-mem 80G --seq-len 8 --global-batch 1M
check "plan --efficiency nan" 2 "--efficiency" "$B" plan --model "$W/m" --gpus 8 --gpu-mem 80G --seq-len 8 --global-batch 1M --efficiency nan
check "plan --gpu-mem nan" 2 "nan" "$B" plan --model "$W/m" --gpus 8 --gpu-mem nan --seq-len 8 --global-batch 1M
check "plan with sane flags" 0 "ecommended" "$B" plan --model "$W/m" --gpus 8 --gpu-mem 80G --seq-len 8 --global-batch 1M
finish
