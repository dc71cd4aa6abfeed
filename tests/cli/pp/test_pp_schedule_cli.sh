#!/bin/bash
# tests/cli/pp/test_pp_schedule_cli.sh — `shardlm pp-schedule` through the CLI:
# the per-rank text timeline holds every micro-batch's F and B once per rank
# (parsed here), the printed bubble and transfer figures equal the closed
# forms computed here ((P-1)(F+B) per rank, zb1p (P-1)(F+B-W), 2 m (P V - 1) transfers x bytes,
# b s h x 4 bytes per transfer, / T under sequence parallelism), the SVG is
# valid XML with one box per compute op, the layout of a Llama and a Mamba
# config places every layer; refusals exit 2 with a message saying why and
# leave an existing SVG untouched.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC. Exit 77 = skipped.
source "${SL_SRC:?}/tests/lib/run.sh" pp_schedule_cli
CLI=$B
# expect NAME WANT_RC NEEDLE -- ARGS...: exit status and a line of the output
expect() {
  local name=$1 want=$2 needle=$3
  shift 4
  "$CLI" pp-schedule "$@" > "$W/out" 2>&1
  local rc=$?
  if [ $rc -ne "$want" ]; then bad "$name: exit $rc, expected $want"; sed 's/^/     /' "$W/out" | tail -n 3
  elif ! grep -qF -- "$needle" "$W/out"; then bad "$name: output lacks '$needle'"; sed 's/^/     /' "$W/out" | tail -n 5
  else ok "$name (exit $rc)"; [ "$want" -ne 0 ] && sed 's/^/     /' "$W/out" | head -n 1
  fi
}

# timeline rows: every rank row has each micro-batch's F and B exactly once
# (W once under zb1p); and the figures against the closed forms
check_timeline() {
  local name=$1 P=$2 m=$3 V=$4 zb=$5
  "$PY" - "$W/out" "$P" "$m" "$V" "$zb" <<'EOF' && ok "$name: timeline rows" || bad "$name: timeline rows"
import re, sys
text = open(sys.argv[1]).read()
P, m, V, zb = map(int, sys.argv[2:6])
rows = re.findall(r'^  rank (\d+) +\|(.*)\|$', text, re.M)
assert len(rows) == P, f"{len(rows)} timeline rows, want {P}"
for r, row in rows:
    for k in ("F", "B") + (("W",) if zb else ()):
        got = sorted(re.findall(k + r'(\d+(?::\d+)?)', row))
        want = sorted(f"{mb}:{c}" if V > 1 else f"{mb}" for mb in range(m) for c in range(V))
        assert got == want, f"rank {r} {k}: {got} != {want}"
EOF
}

BSH=$((1 * 16 * 64 * 4)) # b s h x fp32
for sched in gpipe 1f1b; do
  expect "$sched P=4 m=8" 0 "closed form: (P-1)(F+B) = 9 per rank" -- --pp 4 --micro-batches 8 --pp-schedule $sched \
    --hidden 64 --seq-len 16 --svg "$W/$sched.svg"
  check_timeline "$sched" 4 8 1 0
  x=$((2 * 8 * (4 - 1)))
  grep -qF "transfers: $x sends + $x receives (2 m (P V - 1)), $((x * BSH)) bytes sent, $BSH each" "$W/out" \
    && ok "$sched: $x transfers of $BSH bytes" || bad "$sched: transfer figures: $(grep transfers: "$W/out")"
  grep -q "rank 0 .*idle     9 .*in flight *$([ $sched = gpipe ] && echo 8 || echo 4) " "$W/out" \
    && ok "$sched: rank 0 bubble 9, in-flight peak" || bad "$sched: rank 0 line: $(grep '  rank 0  ' "$W/out")"
done
expect "interleaved P=4 m=8 V=2" 0 "(P-1)/(V m) = 0.1875 of ideal: equal" -- --pp 4 --micro-batches 8 \
  --pp-schedule interleaved --pp-virtual 2 --bytes 1000 --svg "$W/interleaved.svg"
check_timeline "interleaved" 4 8 2 0
x=$((2 * 8 * (4 * 2 - 1)))
grep -qF "transfers: $x sends + $x receives (2 m (P V - 1)), $((x * 1000)) bytes sent" "$W/out" && ok "interleaved: $x transfers" \
  || bad "interleaved: $(grep transfers: "$W/out")"
grep -q "rank 0 .*in flight  11 " "$W/out" && ok "interleaved: rank 0 holds P V + P - 1 = 11 chunks" \
  || bad "interleaved: $(grep '  rank 0  ' "$W/out")"
expect "zb1p P=4 m=8" 0 "closed form: ZB-H1 (P-1)(F+B-W) = 3 per rank, 0.1250 of ideal" -- --pp 4 --micro-batches 8 \
  --pp-schedule zb1p --svg "$W/zb1p.svg"
check_timeline "zb1p" 4 8 1 1
grep -q "^step: 27 time units, bubble 3 per rank" "$W/out" && ok "zb1p: bubble 3 = (P-1)(F+B-W), step 3 m + P - 1" \
  || bad "zb1p: $(grep '^step:' "$W/out")"
expect "sequence parallel: b s h / T" 0 "transfers: 48 sends + 48 receives (2 m (P V - 1)), $((48 * BSH / 2)) bytes" -- --pp 4 \
  --micro-batches 8 --hidden 64 --seq-len 16 --tp 2 --sequence-parallel
"$CLI" pp-schedule --pp 3 --micro-batches 6 --pp-schedule zb1p --bytes 10 --layers 7 --json > "$W/j.json" 2>&1
"$PY" - "$W/j.json" <<'EOF' && ok "--json: valid, figures per rank" || bad "--json: $(head -c 300 "$W/j.json")"
import json, sys
o = json.load(open(sys.argv[1]))
P, m = 3, 6
assert o["schedule"] == "zb1p" and len(o["ranks"]) == P and sum(o["layout"]) == 7
for r, x in enumerate(o["ranks"]):
    assert x["busy"] == 3 * m and x["idle"] == P - 1, x
    assert x["sends"] == m * ((r < P - 1) + (r > 0)) and x["send_bytes"] == 10 * x["sends"], x
EOF
expect "op lists" 0 "rank 1: recv act mb 0 chunk 0 <- rank 0, F0" -- --pp 2 --micro-batches 2 --ops

# SVG: valid XML, one box per compute op (F, B, W colours)
for sched in gpipe 1f1b interleaved zb1p; do
  n=$((4 * 8 * ($([ $sched = interleaved ] && echo 2 || echo 1)) * ($([ $sched = zb1p ] && echo 3 || echo 2))))
  "$PY" - "$W/$sched.svg" $n <<'EOF' && ok "$sched.svg: valid XML, $n op boxes" || bad "$sched.svg"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
boxes = [r for r in root.iter(ns + "rect") if r.get("fill") in ("#2471a3", "#27ae60", "#d35400") and r.get("stroke")]
assert len(boxes) == int(sys.argv[2]), f"{len(boxes)} boxes"
EOF
done

# layouts from model configs: every layer placed, refusals name the fix
expect "llama layout" 0 "--pp-layout 1,2,1" -- --pp 3 --micro-batches 3 --model "$SL_SRC/configs/tiny-llama" --seq-len 16
tiny_model "$W/mamba" mamba '"num_hidden_layers": 7'
expect "mamba layout" 0 "layout (balanced over FLOPs and memory, 7 decoder layers over 3 stages" -- --pp 3 \
  --micro-batches 3 --model "$W/mamba"
sum=$(sed -n 's/^  --pp-layout //p' "$W/out" | tr ',' '+')
[ -n "$sum" ] && [ $(($sum)) -eq 7 ] && ok "mamba layout places all 7 layers ($sum)" || bad "mamba layout '$sum'"
expect "explicit layout" 0 "--pp-layout 5,4,4,5" -- --pp 4 --micro-batches 4 --layers 18 --pp-layout 5,4,4,5

echo good > "$W/keep.svg"
expect "refuse m < P under 1f1b" 2 "use --grad-accum >= 4 (--micro-batches in pp-schedule" -- --pp 4 --micro-batches 3 --svg "$W/keep.svg"
expect "refuse m < P under zb1p" 2 "needs at least as many micro-batches as stages" -- --pp 4 --micro-batches 2 \
  --pp-schedule zb1p
expect "refuse interleaved m % P" 2 "multiple of --pp (4)" -- --pp 4 --micro-batches 6 --pp-schedule interleaved
expect "refuse layout sum" 2 "must sum to 18" -- --pp 4 --micro-batches 4 --layers 18 --pp-layout 5,4,4,4 \
  --svg "$W/keep.svg"
expect "refuse empty stage" 2 "leaves stage 1 empty" -- --pp 4 --micro-batches 4 --layers 18 --pp-layout 9,0,4,5
expect "refuse P > units" 2 "more stages than the model has units (4 decoder layers" -- --pp 7 --micro-batches 8 --model \
  "$SL_SRC/configs/tiny-llama"
expect "refuse unknown schedule" 2 "expected gpipe, 1f1b, interleaved or zb1p" -- --pp 2 --micro-batches 2 \
  --pp-schedule dualpipe
expect "refuse missing flags" 2 "--pp P and --micro-batches M are required" -- --pp 2
expect "refuse unwritable svg" 2 "cannot create" -- --pp 2 --micro-batches 2 --svg "$W/no/such/dir/x.svg"
[ "$(cat "$W/keep.svg")" = good ] && ok "refusals leave an existing SVG untouched" || bad "keep.svg was changed"
ls "$W/no" > /dev/null 2>&1 && bad "a partial svg directory appeared" || ok "no partial svg"
expect "help" 0 "usage: shardlm pp-schedule" -- --help

finish
