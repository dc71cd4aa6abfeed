#!/usr/bin/env bash
# The checkpoint records the lr schedule (issue 41 item 3), world size 2:
#  - a wsd run killed after committing its step-6 checkpoint and resumed with
#    --resume and no schedule flags continues the checkpoint's wsd schedule:
#    the lr of every step (and the loss) equals the straight run's, bitwise;
#  - resuming with a different --lr-schedule is refused with exit 2 naming
#    the flag, before any step is trained;
#  - --lr-schedule-override switches: the steps after the checkpoint follow the
#    new schedule (their lr equals a straight cosine run's).
source "${SL_SRC:?}/tests/lib/run.sh" lr_resume mpi
tiny_model "$W/model" llama '"num_hidden_layers": 1'
RUN="$MPI -np 2 $B train --model $W/model --init random --seq-len 16 --micro-batch 1 --threads 1 --steps 12 --warmup 2
 --lr 1e-3 --min-lr 1e-4 --summary false --plot false --log-every 100"
WSD="--lr-schedule wsd --lr-decay-steps 4 --lr-decay-shape 1-sqrt"
$RUN $WSD --out-dir "$W/a" > "$W/a.log" 2>&1 || { bad "straight wsd run failed"; tail "$W/a.log"; }
$RUN --out-dir "$W/c" > "$W/c.log" 2>&1 || { bad "straight cosine run failed"; tail "$W/c.log"; }
kill_at6() { # dir: a wsd run killed after its step-6 checkpoint
  SL_CKPT_FAULT=after-latest SL_CKPT_FAULT_STEP=6 SL_CKPT_FAULT_RANK=0 \
    $RUN $WSD --out-dir "$W/$1" --ckpt-dir "$W/$1/ck" --ckpt-every 3 > "$W/$1.log" 2>&1 && bad "$1: the faulted run did not die"
  grep -q "SL_CKPT_FAULT: killing" "$W/$1.log" || { bad "$1: fault not reached"; tail "$W/$1.log"; }
}
kill_at6 b
$RUN --out-dir "$W/b" --ckpt-dir "$W/b/ck" --ckpt-every 3 --resume > "$W/b2.log" 2>&1 \
  || { bad "the resumed run failed"; tail "$W/b2.log"; }
grep -q "resumed from .* at step 6" "$W/b2.log" || bad "did not resume at step 6"
grep -q "lr-schedule wsd: continued from the checkpoint" "$W/b2.log" && ok "the log says the schedule continues" \
  || bad "no 'continued from the checkpoint' line"
cmp_lr() { # label straight resumed-metrics
  "$PY" - "$2" "$3" "$1" <<'P'
import json, sys
load = lambda p: {j["step"]: (j["lr"], j["loss"]) for j in map(json.loads, open(p))}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(1, 13)), sorted(b)
bad = [(s, a[s], b[s]) for s in b if a[s] != b[s]]
print(f"{sys.argv[3]}: lr and loss of steps 1..12 {'equal' if not bad else 'differ: %s' % bad[:3]}")
sys.exit(1 if bad else 0)
P
}
out=$(cmp_lr "wsd resumed at 6 = straight wsd" "$W/a/metrics.jsonl" "$W/b/metrics.jsonl") && ok "$out" || bad "$out"
# negative control: the straight cosine run differs from the wsd run
out=$(cmp_lr "control: cosine vs wsd" "$W/c/metrics.jsonl" "$W/a/metrics.jsonl") && bad "$out" || ok "$out (as it must)"
# a different schedule on resume: refused, exit 2, naming the flag; nothing trained
kill_at6 d
$RUN --out-dir "$W/d" --ckpt-dir "$W/d/ck" --ckpt-every 3 --resume --lr-schedule cosine > "$W/d2.log" 2>&1
rc_is "--lr-schedule cosine on a wsd checkpoint" $? 2 "$W/d2.log" "--lr-schedule cosine: the checkpoint"
grep -q '"step": 7' "$W/d/metrics.jsonl" && bad "the refused run trained step 7" || ok "the refused run trained nothing"
$RUN --out-dir "$W/d" --ckpt-dir "$W/d/ck" --ckpt-every 3 --resume --lr-decay-shape linear > "$W/d3.log" 2>&1
rc_is "--lr-decay-shape linear on a 1-sqrt checkpoint" $? 2 "$W/d3.log" "--lr-decay-shape linear"
# explicit override: the steps after 6 follow cosine
$RUN --out-dir "$W/d" --ckpt-dir "$W/d/ck" --ckpt-every 3 --resume --lr-schedule cosine --lr-schedule-override \
  > "$W/d4.log" 2>&1 || { bad "the override run failed"; tail "$W/d4.log"; }
if "$PY" - "$W/a/metrics.jsonl" "$W/c/metrics.jsonl" "$W/d/metrics.jsonl" <<'P'; then ok "--lr-schedule-override: steps 1-6 wsd, 7-12 cosine"; else bad "--lr-schedule-override: wrong lr sequence"; fi
import json, sys
lr = lambda p: {j["step"]: j["lr"] for j in map(json.loads, open(p))}
a, c, d = map(lr, sys.argv[1:4])
want = {s: (a[s] if s <= 6 else c[s]) for s in range(1, 13)}
print("override lr:", [d.get(s) for s in range(1, 13)])
sys.exit(0 if d == want and a[7] != c[7] else 1)
P
grep -q "lr-schedule-override" "$W/d4.log" && ok "the override is logged" || bad "the override is not logged"
finish
