#!/usr/bin/env bash
# `shardlm plot`'s SVG read back (tools/plot.c, docs/formats.md "metrics.svg"):
# sizes start at 0 (the memory panel's y labels are >= 0, its lowest is 0,
# although an arena flat at 0 would widen a plain range below it), no legend
# over the data (every legend box and legend text lies outside every
# plotting rectangle), and series told apart by more than colour: in the
# memory panel every line has its own colour AND its own dash pattern, and
# two arenas with identical values (params = grads here) carry markers at
# different places. The metrics are written here: flat arenas, one at 0,
# held-out loss every 10 steps.
source "${SL_SRC:?}/tests/lib/run.sh" plot_svg
"$PY" - "$W/m.jsonl" <<'P'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 41):
        l = {"step": s, "loss": 5.5 - 2 * math.log(s) / math.log(40), "lr": 1e-3, "grad_norm": 1.5,
             "tokens_per_s": 1000.0 + s, "peak_bytes": 3 << 20,
             "arena_peak": {"params": 1 << 20, "grads": 1 << 20, "optim": 2 << 20, "gather": 0, "acts": 300000,
                            "workspace": 290000, "host_optim": 0, "scratch": 40000}}
        if s % 10 == 0: l["eval_loss"] = l["loss"] + 0.1
        f.write(json.dumps(l) + "\n")
P
"$B" plot "$W/m.jsonl" "$W/m.svg" > "$W/plot.log" 2>&1 || { bad "plot failed"; cat "$W/plot.log"; }
out=$("$PY" - "$W/m.svg" <<'P' 2>&1
import re, sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
el = list(root.iter())
f = lambda e, k, d=0.0: float(e.get(k, d))
rects = [(f(r, "x"), f(r, "y"), f(r, "x") + f(r, "width"), f(r, "y") + f(r, "height"))
         for r in el if r.tag == NS + "rect" and r.get("fill") == "none"]  # the plotting areas
texts = [t for t in el if t.tag == NS + "text"]
inside = lambda x, y, r: r[0] < x < r[2] and r[1] < y < r[3]
overlap = lambda a, b: a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
errs = []
# the panel whose y label names memory
mem = None
for t in texts:
    if "memory" in (t.text or "") and t.get("transform"):
        cy = f(t, "y")
        mem = [r for r in rects if r[1] <= cy <= r[3]][0]
if mem is None: sys.exit("no memory panel")
ticks = [float(t.text) for t in texts if t.get("text-anchor") == "end" and f(t, "x") < mem[0] and
         mem[1] - 6 <= f(t, "y") - 4 <= mem[3] + 6]
if not ticks or min(ticks) != 0 or any(v < 0 for v in ticks): errs.append("memory axis labels %s" % ticks)
# legends: coloured texts (and any legend box) outside every plotting rectangle
legend = [t for t in texts if t.get("fill")]
if len(legend) < 8: errs.append("%d legend entries" % len(legend))
for t in legend:
    x, y, w = f(t, "x"), f(t, "y"), 6.5 * len(t.text or "")
    x0 = x - w if t.get("text-anchor") == "end" else x
    box = (x0, y - 10, x0 + w, y + 2)
    if any(overlap(box, r) for r in rects): errs.append("legend text '%s' over a plot at (%.0f, %.0f)" % (t.text, x, y))
for b in el:
    if b.tag == NS + "rect" and b.get("class") == "legend":
        bb = (f(b, "x"), f(b, "y"), f(b, "x") + f(b, "width"), f(b, "y") + f(b, "height"))
        if any(overlap(bb, r) for r in rects): errs.append("legend box %s over a plot" % (bb,))
# the memory panel's lines: distinct colours and distinct dash patterns
lines = []
for p in el:
    if p.tag != NS + "polyline": continue
    pts = [tuple(map(float, q.split(","))) for q in p.get("points").split()]
    if all(inside(x, y, (mem[0] - 1, mem[1] - 1, mem[2] + 1, mem[3] + 1)) for x, y in pts):
        lines.append((p.get("stroke"), p.get("stroke-dasharray", "solid"), tuple(pts)))
cols, dashes = {l[0] for l in lines}, {l[1] for l in lines}
if len(lines) != 8 or len(cols) != 8 or len(dashes) != 8:
    errs.append("memory: %d lines, %d colours, %d dash patterns" % (len(lines), len(cols), len(dashes)))
same = [l for l in lines if l[2] == lines[0][2]]  # params and grads: the same points
if len(same) != 2: errs.append("%d lines identical to params's (want 2: params, grads)" % len(same))
else:
    def marks(colour):  # marker positions in the memory panel
        m = set()
        for e in el:
            if e.get("fill") != colour and e.get("stroke") != colour or e.tag == NS + "polyline": continue
            if e.tag == NS + "circle": xy = f(e, "cx"), f(e, "cy")
            elif e.tag == NS + "rect" and e.get("class") != "legend": xy = f(e, "x") + 3, f(e, "y") + 3
            elif e.tag == NS + "path": xy = tuple(map(float, re.findall(r"[-\d.]+", e.get("d"))[:2]))
            else: continue
            if inside(xy[0], xy[1], (mem[0] - 5, mem[1] - 5, mem[2] + 5, mem[3] + 5)): m.add(round(xy[0]))
        return m
    a, b = marks(same[0][0]), marks(same[1][0])
    if not a or not b or a == b: errs.append("identical lines' markers at the same places: %s %s" % (sorted(a), sorted(b)))
if errs: sys.exit("; ".join(errs))
print("memory axis from %g to %g; %d legend entries outside %d plots; 8 arenas in 8 colours x 8 dashes" %
      (min(ticks), max(ticks), len(legend), len(rects)))
P
) && ok "$out" || bad "$out"
finish
