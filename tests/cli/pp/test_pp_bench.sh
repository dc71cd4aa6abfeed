#!/bin/bash
# tests/cli/pp/test_pp_bench.sh — `shardlm bench pipeline` under mpirun: for P = 2
# and P = 4 (oversubscribed) and every schedule, the builder's op lists run
# over real sl_comm send/recv to completion; every received payload is the
# one its (sending stage, micro-batch, direction) names; the comm counters
# (SEND / RECV calls and bytes over warm-up + measured steps) equal the
# closed forms computed here: per step rank r sends and receives
# m (2V - [r = 0] - [r = P-1]) transfers of --bytes. A swapped pair of
# receives must be reported (exit 1); a schedule the builder refuses exits 2.
# Timing figures are printed by the bench, never asserted here.
# Env: SL_BUILD (CLI at $SL_BUILD/shardlm), SL_SRC. Exit 77 = skipped.
source "${SL_SRC:?}/tests/lib/run.sh" pp_bench mpi
CLI=$B

# run NAME P M BYTES V [FLAGS...]: every schedule, then the JSON lines against the closed forms
run() {
  local name=$1 P=$2 m=$3 bytes=$4 V=$5
  shift 5
  timeout 120 $MPI -np "$P" "$CLI" bench pipeline --micro-batches "$m" --pp-schedule all --pp-virtual "$V" \
    --bytes "$bytes" --f-ms 0.5 --steps 1 --sleep --timeout 60 "$@" > "$W/out" 2> "$W/err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    bad "$name: exit $rc"; tail -n 5 "$W/err" "$W/out" | sed 's/^/     /'; return
  fi
  ok "$name: exit 0"
  "$PY" - "$W/out" "$P" "$m" "$bytes" "$V" <<'EOF' > "$W/check" 2>&1 && ok "$name: $(cat "$W/check")" \
    || { bad "$name: figures"; sed 's/^/     /' "$W/check"; }
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
P, m, nbytes, V = map(int, sys.argv[2:6])
got = {o["schedule"]: o for o in lines}
assert sorted(got) == ["1f1b", "gpipe", "interleaved", "zb1p"], f"schedules run: {sorted(got)}"
for name, o in got.items():
    v = V if name == "interleaved" else 1
    runs = o["steps_run"]
    assert runs == 2, f"{name}: {runs} steps run, want warm-up + 1"
    assert o["payload_errors"] == 0, f"{name}: {o['payload_errors']} payloads mismatched"
    for r in range(P):
        x = m * (2 * v - (r == 0) - (r == P - 1))
        for key, want in (("counter_sends", x), ("counter_recvs", x),
                          ("counter_send_bytes", x * nbytes), ("counter_recv_bytes", x * nbytes)):
            assert o[key][r] == runs * want, f"{name} rank {r} {key}: {o[key][r]}, want {runs} x {want}"
        assert o["builder_sends"][r] == x and o["builder_recvs"][r] == x, f"{name} rank {r}: builder {o['builder_sends'][r]}, want {x}"
    assert o["counters_equal"] is True
print(f"4 schedules, payloads verified, counters = m (2V - ends) x {nbytes} B per rank")
EOF
}

run "P=2 m=4, 64 KiB (rendezvous)" 2 4 65536 2
run "P=4 m=4 oversubscribed, 64 KiB" 4 4 65536 2
run "P=2 m=2 V=3, 1003 B, sends overlapped" 2 2 1003 3 --overlap-sends
run "P=3 m=3 (interleaved V=2), 0 B" 3 3 0 2

# a mismatched pairing is caught: the last rank's first two receives swapped
timeout 120 $MPI -np 2 "$CLI" bench pipeline --micro-batches 4 --pp-schedule gpipe --bytes 4096 --f-ms 0.1 \
  --steps 1 --sleep --timeout 60 --inject swap-recvs > "$W/out" 2> "$W/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "the payload is not the one of stage 0's activation of micro-batch 1" "$W/err" \
  && grep -q '"payload_errors": [1-9]' "$W/out"; then
  ok "swapped receives: exit 1, $(grep -o 'rank 1 op [0-9]* ([^)]*)' "$W/err" | head -n 1) reported"
else
  bad "swapped receives: exit $rc"; tail -n 5 "$W/err" | sed 's/^/     /'
fi

# refusals: the builder's, and a rank count that is not --pp
timeout 60 $MPI -np 4 "$CLI" bench pipeline --micro-batches 2 --pp-schedule 1f1b --f-ms 0 > "$W/out" 2> "$W/err"
rc=$?
[ $rc -eq 2 ] && grep -q "1f1b needs at least as many micro-batches as stages" "$W/err" \
  && ok "1f1b m=2 < P=4: exit 2, refused" || { bad "1f1b m < P: exit $rc"; tail -n 3 "$W/err"; }
timeout 60 $MPI -np 2 "$CLI" bench pipeline --micro-batches 4 --pp 3 > "$W/out" 2> "$W/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--pp 3 but mpirun started 2 ranks" "$W/err" \
  && ok "--pp 3 under -np 2: exit 2" || { bad "--pp vs ranks: exit $rc"; tail -n 3 "$W/err"; }
"$CLI" bench pipeline --micro-batches 4 --f-ms x > "$W/out" 2> "$W/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--f-ms expects a number" "$W/err" && ok "bad --f-ms: exit 2" \
  || { bad "bad --f-ms: exit $rc"; cat "$W/err"; }

finish
