#!/usr/bin/env bash
# --lr-schedule wsd (both decay shapes, --lr-decay-steps and --lr-decay-frac),
# linear and constant (issue 41 item 3): the lr of every step in metrics.jsonl
# equals the definition in docs/cli.md "Learning-rate schedules", computed
# here in Python. The metrics write lr with 9 significant digits ("%.9g"), so
# the check is equality of the oracle's double printed the same way: exact at
# the precision written. (The engine evaluates the same IEEE operations in the
# same order, sqrt correctly rounded, and the default build has no FMA, so the
# doubles should agree bitwise; only the 9 written digits are observable here.)
# Negative control: the cosine run against the linear formula must differ.
# Bad values are refused with exit 2 naming the flag.
source "${SL_SRC:?}/tests/lib/run.sh" lr_schedules
tiny_model "$W/model" llama '"num_hidden_layers": 1'
RUN="$B train --model $W/model --init random --seq-len 16 --micro-batch 1 --threads 1 --steps 14 --lr 1e-3 --min-lr 1e-4
 --summary false --plot false --log-every 100"
run() { # name flags...
  local n=$1; shift
  $RUN --out-dir "$W/$n" "$@" > "$W/$n.log" 2>&1 || { bad "$n: the run failed"; tail -5 "$W/$n.log"; }
}
run wsd_sqrt --warmup 3 --lr-schedule wsd --lr-decay-steps 5 --lr-decay-shape 1-sqrt
run wsd_lin --warmup 2 --lr-schedule wsd --lr-decay-frac 0.3 --lr-decay-shape linear
run wsd_w0 --warmup 0 --lr-schedule wsd --lr-decay-steps 14
run linear --warmup 3 --lr-schedule linear
run linear_w0 --warmup 0 --lr-schedule linear
run constant --warmup 4 --lr-schedule constant
run cosine --warmup 3
"$PY" - "$W" <<'P'
import json, math, sys
W = sys.argv[1]
S, LR, MIN = 14, 1e-3, 1e-4
def lr_at(s, sched, warm, N=0, frac=0.2, shape="1-sqrt"):
    # docs/cli.md "Learning-rate schedules"
    if warm > 0 and s < warm:
        return LR * float(s + 1) / float(warm)
    if sched == "constant":
        return LR
    if sched == "wsd":
        N = N if N > 0 else round(frac * S)  # llround: halves away from zero (none here)
        s0 = S - 1 - N
        if N <= 0 or s <= s0:
            return LR
        q = min(float(s - s0) / float(N), 1.0)
        f = q if shape == "linear" else math.sqrt(q)
        return MIN + (LR - MIN) * (1.0 - f)
    span = S - 1 - warm
    p = min(max(float(s - warm) / float(span if span > 1 else 1), 0.0), 1.0)
    if sched == "linear":
        return MIN + (LR - MIN) * (1.0 - p)
    return MIN + 0.5 * (LR - MIN) * (1.0 + math.cos(math.pi * p))
cases = {
    "wsd_sqrt": dict(sched="wsd", warm=3, N=5, shape="1-sqrt"),
    "wsd_lin": dict(sched="wsd", warm=2, frac=0.3, shape="linear"),
    "wsd_w0": dict(sched="wsd", warm=0, N=14),
    "linear": dict(sched="linear", warm=3),
    "linear_w0": dict(sched="linear", warm=0),
    "constant": dict(sched="constant", warm=4),
    "cosine": dict(sched="cosine", warm=3),
    "cosine-as-linear (negative control)": dict(sched="linear", warm=3, run="cosine"),
}
fails = 0
for name, kw in cases.items():
    run = kw.pop("run", name)
    got = [(j["step"], j["lr"]) for j in map(json.loads, open(f"{W}/{run}/metrics.jsonl"))]
    want = [float("%.9g" % lr_at(s - 1, **kw)) for s, _ in got]
    bad = [(s, g, w) for (s, g), w in zip(got, want) if g != w]
    ok = len(got) == S and not bad
    if "negative" in name:
        ok = len(got) == S and len(bad) > 0
        print(("ok  " if ok else "FAIL") + f" {name}: {len(bad)} of {S} steps differ, as they must")
    else:
        print(("ok  " if ok else "FAIL") + f" {name}: {len(got)} steps, lr = the formula at 9 digits"
              + (f"; differ at {bad[:3]}" if bad else "") + f" (last {got[-1][1]!r})")
    fails += not ok
sys.exit(1 if fails else 0)
P
[ $? -eq 0 ] && ok "every schedule's lr is its formula" || bad "an lr differs from its formula (above)"
# refusals: exit 2 naming the flag
$RUN --out-dir "$W/x" --lr-schedule step > "$W/x1.log" 2>&1; rc_is "--lr-schedule step" $? 2 "$W/x1.log" "--lr-schedule"
$RUN --out-dir "$W/x" --lr-schedule wsd --lr-decay-shape cubic > "$W/x2.log" 2>&1
rc_is "--lr-decay-shape cubic" $? 2 "$W/x2.log" "--lr-decay-shape"
$RUN --out-dir "$W/x" --warmup 10 --lr-schedule wsd --lr-decay-steps 5 > "$W/x3.log" 2>&1
rc_is "wsd decay longer than the steps after warmup" $? 2 "$W/x3.log" "--lr-decay-steps"
$RUN --out-dir "$W/x" --lr-schedule wsd --lr-decay-frac 1.5 > "$W/x4.log" 2>&1
rc_is "--lr-decay-frac 1.5" $? 2 "$W/x4.log" "--lr-decay-frac"
finish
