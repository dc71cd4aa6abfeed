#!/usr/bin/env bash
# The pipeline bit-identity matrix (issue 14, test 1): at a fixed global
# batch and --grad-accum m, every schedule (gpipe, 1f1b, interleaved V=2, zb1p) at
# every --pp P in 2, 3, 4 (and DP 2 x PP 2 under ZeRO-1/2 for gpipe, interleaved, zb1p) trains to per-step losses and exported weights
# BIT-IDENTICAL to one process (tests/lib/compare.py --exact). The pairs
# tests/cli/pp/test_pp_parity.sh already runs on its 4-layer model (gpipe P2 P3,
# 1f1b P2 P4, interleaved P2) run here on a 7-layer model: 7 is divisible by
# none of 2, 3, 4 (nor by the 6 and 8 virtual stages of interleaved at P 3
# and 4), so every balanced layout is uneven and a dropped or doubled layer
# would change the weights. 1f1b also runs m = 4 at P = 3 (m not a multiple
# of P). Interleaved needs m a multiple of P (pipeline/build.c): P 3 runs at
# m = 6 against its own one-process reference. The layouts the runs use are
# checked to place all 7 layers (`shardlm pp-schedule --json`).
# Also the schedule's SVG: pipeline.svg next to metrics.svg in a training
# run and from `train --pp-dry-run`, well-formed, equal to `shardlm
# pp-schedule --svg`'s, with its bubble (docs/pipeline.md).
# shellcheck source=tests/lib/parity.sh
source "${SL_SRC:?}/tests/lib/parity.sh" ppm # B W CMP MPI ok bad (run and check are this file's)
tiny_model "$W/llama" llama '"num_hidden_layers": 7'
tiny_data "$W/data"
run() { # name world accum [flags...]
  local name=$1 np=$2 ga=$3; shift 3
  timeout 120 $MPI -np "$np" "$B" train --model "$W/llama" --init random --data "$W/data" --data-order sequential \
     --steps 2 --seq-len 16 --micro-batch 2 --grad-accum "$ga" --lr 1e-3 --warmup 1 --clip 0.5 --threads 1 \
     --summary false --plot false --log-every 100 --out-dir "$W/$name" --save "$W/$name/model" "$@" \
     > "$W/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "run $name (exit $rc)"; tail -5 "$W/$name.log"; return 1; fi
}
check() { # run reference label
  if $CMP "$W/$1" "$W/$2" --exact > "$W/$1.cmp" 2>&1; then ok "$3: $(tail -1 "$W/$1.cmp")"
  else bad "$3"; cat "$W/$1.cmp"; fi
}
# every layer placed: the layout the run logs sums to 7 decoder layers over P*V stages
layout() { # name P m schedule [V]
  local name=$1 P=$2 m=$3 sched=$4 V=${5:-1} vflag=""
  [ "$V" -gt 1 ] && vflag="--pp-virtual $V"
  local lay
  lay=$(grep -o "decoder layers per stage [0-9,]*" "$W/$name.log" | head -1 | awk '{print $5}')
  local want
  want=$("$B" pp-schedule --pp "$P" --micro-batches "$m" --pp-schedule "$sched" $vflag --model "$W/llama" --json |
    /usr/bin/python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['layout'])))")
  if [ -n "$lay" ] && [ "$lay" = "$want" ] &&
     [ "$(echo "$lay" | tr ',' '\n' | awk '{s+=$1} END {print s}')" = 7 ] &&
     [ "$(echo "$lay" | tr ',' '\n' | wc -l)" = $((P * V)) ]; then
    ok "$name: layout $lay places all 7 layers on $((P * V)) stages"
  else bad "$name: layout '$lay' (pp-schedule: '$want')"; fi
}
run base4 1 4
run base6 1 6
for P in 2 3 4; do
  run g$P "$P" 4 --pp "$P" --pp-schedule gpipe && check g$P base4 "gpipe P=$P m=4 == one process"
done
layout g3 3 4 gpipe
for P in 2 3 4; do # m = 4 at P = 3: not a multiple of P
  run f$P "$P" 4 --pp "$P" --pp-schedule 1f1b --plot true && check f$P base4 "1f1b P=$P m=4 == one process"
done
layout f4 4 4 1f1b
run f3m6 3 6 --pp 3 --pp-schedule 1f1b && check f3m6 base6 "1f1b P=3 m=6 == one process"
run i2 2 4 --pp 2 --pp-schedule interleaved --pp-virtual 2 && check i2 base4 "interleaved P=2 V=2 m=4 == one process"
run i3 3 6 --pp 3 --pp-schedule interleaved --pp-virtual 2 && check i3 base6 "interleaved P=3 V=2 m=6 == one process"
run i4 4 4 --pp 4 --pp-schedule interleaved --pp-virtual 2 && check i4 base4 "interleaved P=4 V=2 m=4 == one process"
layout i3 3 6 interleaved 2
layout i4 4 4 interleaved 2
# an explicit uneven split (1 + 5 + 1 layers): still every layer, bit for bit
run u3 3 4 --pp 3 --pp-layout 1,5,1 && check u3 base4 "1f1b P=3 --pp-layout 1,5,1 == one process"
# the schedule drawn next to metrics.svg (--plot, the default) and by --pp-dry-run
# (one process, nothing trained): well-formed SVG, byte for byte the one
# `shardlm pp-schedule --svg` draws, its bubble that of `pp-schedule --json`
svgcheck() { # label svg P m schedule [V]
  local label=$1 svg=$2 P=$3 m=$4 sched=$5 V=${6:-1} vflag=""
  [ "$V" -gt 1 ] && vflag="--pp-virtual $V"
  "$B" pp-schedule --pp "$P" --micro-batches "$m" --pp-schedule "$sched" $vflag --model "$W/llama" \
    --svg "$W/ref-$label.svg" --json > "$W/ref-$label.json" || { bad "$label: pp-schedule"; return; }
  if /usr/bin/python3 - "$svg" "$W/ref-$label.json" <<'PY'
import json, re, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
title = "".join(root.find("{http://www.w3.org/2000/svg}text").itertext())
got = re.search(r"bubble (\d+) of (\d+) time units", title)
j = json.load(open(sys.argv[2]))
want = (j["ranks"][0]["idle"], j["step_time"])
assert got and (int(got.group(1)), int(got.group(2))) == want, (title, want)
PY
  then
    if cmp -s "$svg" "$W/ref-$label.svg"; then ok "$label: $(basename "$svg") is well-formed, equals pp-schedule --svg"
    else bad "$label: $(basename "$svg") differs from pp-schedule --svg"; fi
  else bad "$label: $svg missing, malformed or with another bubble"; fi
}
[ -s "$W/f4/metrics.svg" ] && ok "f4: metrics.svg written" || bad "f4: no metrics.svg"
svgcheck train-f4 "$W/f4/pipeline.svg" 4 4 1f1b
grep -q "pipeline: .*pipeline.svg" "$W/f4.log" && ok "f4: the run names pipeline.svg" || bad "f4: pipeline.svg not named"
[ ! -e "$W/g4/pipeline.svg" ] && ok "--plot false: no pipeline.svg" || bad "--plot false wrote pipeline.svg"
dry() { # label P m schedule [V]
  local label=$1 P=$2 m=$3 sched=$4 V=${5:-1} vflag=""
  [ "$V" -gt 1 ] && vflag="--pp-virtual $V"
  timeout 60 "$B" train --model "$W/llama" --data "$W/data" --micro-batch 2 --seq-len 16 --grad-accum "$m" \
    --pp "$P" --pp-schedule "$sched" $vflag --pp-dry-run --out-dir "$W/$label" > "$W/$label.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$label: dry run exit $rc"; tail -3 "$W/$label.log"; return; fi
  local want
  svgcheck "$label" "$W/$label/pipeline.svg" "$P" "$m" "$sched" "$V"
  want=$(/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('bubble: %d of %d' % (j['ranks'][0]['idle'], j['step_time']))" "$W/ref-$label.json")
  if grep -q "^$want time units" "$W/$label.log" && [ "$(grep -c '^  rank' "$W/$label.log")" = $((2 * P)) ] &&
     [ ! -e "$W/$label/metrics.jsonl" ]; then ok "$label: dry run prints the timeline and '$want', trains nothing"
  else bad "$label: dry run output (want '$want')"; tail -5 "$W/$label.log"; fi
}
dry dry-i4 4 8 interleaved 2
dry dry-g3 3 5 gpipe
# the dry run refuses what training refuses (exit 2, the builder's message), and --pp 1
"$B" train --model "$W/llama" --pp 3 --grad-accum 2 --pp-dry-run --out-dir "$W/dry-bad" > "$W/dry-bad.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "at least as many micro-batches as stages" "$W/dry-bad.log" && [ ! -e "$W/dry-bad/pipeline.svg" ] &&
  ok "dry run refuses 1f1b m < P (exit 2, no svg)" || bad "dry run m < P: exit $rc"
"$B" train --model "$W/llama" --pp-dry-run --out-dir "$W/dry-p1" > "$W/dry-p1.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--pp-dry-run .* needs --pp P >= 2" "$W/dry-p1.log" && ok "dry run refuses --pp 1 (exit 2)" ||
  bad "dry run --pp 1: exit $rc"
# zb1p (B and W split) on the uneven 7-layer layouts
for P in 2 3 4; do run z$P "$P" 4 --pp "$P" --pp-schedule zb1p && check z$P base4 "zb1p P=$P"; done
# ZeRO on the DP axis with every schedule: DP 2 x PP 2 (4 ranks, m = 2 per DP rank) bit-identical to DP 2 alone
run d2 2 2
run d2g 4 2 --pp 2 --pp-schedule gpipe --zero 1 && check d2g d2 "DP2 x PP2 gpipe ZeRO-1 == DP 2"
run d2i 4 2 --pp 2 --pp-schedule interleaved --pp-virtual 2 --zero 2 && check d2i d2 "DP2 x PP2 interleaved ZeRO-2 == DP 2"
run d2z 4 2 --pp 2 --pp-schedule zb1p --zero 1 && check d2z d2 "DP2 x PP2 zb1p ZeRO-1 == DP 2"
finish
