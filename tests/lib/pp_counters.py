#!/usr/bin/env python3
"""Every 'pipeline rank R: N sends (B bytes), M receives (C bytes)' line of a
training log (engine/schedule_pp.c, one per rank) against `shardlm
pp-schedule --json` x the steps: the PP communicator's counts and bytes must
equal the static schedule's (pipeline/build.c, an independent computation).

usage: pp_counters.py SCHEDULE.json TRAIN.log STEPS   (exit 0: all equal)"""
import json
import re
import sys


def main():
    j = json.load(open(sys.argv[1]))
    steps = int(sys.argv[3])
    seen, ranks, bad = 0, set(), 0
    for line in open(sys.argv[2]):
        m = re.search(r"pipeline rank (\d+): (\d+) sends \((\d+) bytes\), (\d+) receives \((\d+) bytes\)", line)
        if not m:
            continue
        f = j["ranks"][int(m.group(1))]
        seen += 1
        ranks.add(int(m.group(1)))
        want = (f["sends"] * steps, f["send_bytes"] * steps, f["recvs"] * steps, f["recv_bytes"] * steps)
        got = tuple(int(x) for x in m.groups()[1:])
        if got != want:
            print("pipeline rank %s: counters %s, schedule %s" % (m.group(1), got, want))
            bad = 1
    if len(ranks) != len(j["ranks"]):  # every PP rank (each DP x TP replica of a stage logs its own line)
        print("counter lines of PP ranks %s in %s, %d ranks in the schedule" % (sorted(ranks), sys.argv[2], len(j["ranks"])))
        bad = 1
    print("%d ranks' counters checked against %d steps of the schedule" % (seen, steps))
    return bad


if __name__ == "__main__":
    sys.exit(main())
