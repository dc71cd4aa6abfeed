#!/usr/bin/env python3
"""tests/lib/unit_margins.py LOG... — the margins of the C kernel tests.

Reads the outputs of test_kernels, test_mamba_kernels, test_vocab_parallel
and test_cuda_emu (each check prints its error and its tolerance), takes the
worst error of each check over all the logs given (one log per
OPENBLAS_CORETYPE x OMP_NUM_THREADS, named TEST.CORETYPE.THREADS.log), and
prints the checks whose tolerance is within 10x of that error. Exit 1 when
there is one. docs/CONTRIBUTING.md "Tolerances" says how to run it."""
import collections, os, re, sys

PATS = [re.compile(r'^(?:ok|FAIL|PASS)\s+(.*?)\s+max_err (\S+) tol (\S+)'),
        re.compile(r'^(?:ok|FAIL|PASS)\s+(.*?)\s+err=(\S+) tol=(\S+)'),
        re.compile(r'^(?:ok|FAIL|PASS)\s+(.*?)\s+err (\S+) tol (\S+)'),
        re.compile(r'^((?:bf16c )?\S+)\s+n=\d+\s+max_abs=\S+ rel=(\S+) tol=(\S+)')]
worst = {}
for path in sys.argv[1:]:
    test, cfg = os.path.basename(path).split('.', 1)
    for line in open(path, errors='replace'):
        for p in PATS:
            m = p.match(line.strip())
            if m:
                key, err, tol = (test, m.group(1)), float(m.group(2)), float(m.group(3))
                if key not in worst or not err <= worst[key][0]:
                    worst[key] = (err, tol, cfg)
                break
tight, per = [], collections.defaultdict(lambda: [0, 0, float('inf')])
for (test, name), (err, tol, cfg) in worst.items():
    s = per[test]
    s[0] += 1
    if tol == 0:
        s[1] += 1
        if err != 0: tight.append((test, name, err, tol, cfg))
        continue
    margin = tol / err if err > 0 else float('inf')
    s[2] = min(s[2], margin)
    if not margin >= 10: tight.append((test, name, err, tol, cfg))
for test, (n, bit, m) in sorted(per.items()):
    print(f'{test}: {n} checks, {bit} bitwise, smallest margin {m:.1f}x')
for t in tight:
    print('WITHIN 10x: %s %s: error %.3e, tolerance %.1e (%s)' % t)
sys.exit(1 if tight or not worst else 0)
