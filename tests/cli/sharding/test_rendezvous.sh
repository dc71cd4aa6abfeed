#!/usr/bin/env bash
# tests/cli/sharding/test_rendezvous.sh — the MPI-free NCCL rendezvous
# (shard/bootstrap.c) against strays and impostors, each rank its own process
# started the way torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or a
# script (SL_RANK, SL_WORLD_SIZE, SL_INIT_METHOD=fs:PATH) starts it. The
# processes are $SL_BUILD/tests/test_rendezvous (test_rendezvous.c beside
# this script): the library's sl_boot_from_env + sl_boot_share with the
# 129-byte message of sl_comm_nccl_create_boot, the only caller (shardlm
# train itself needs MPI for its host collectives; docs/comm.md).
#  a. tcp, 3 ranks, no secret set: a stray that connects and closes, one that
#     sends an HTTP request and one that stays silent, all during the
#     rendezvous: every rank still gets rank 0's id, and rank 0 logs each
#     stray once, naming its address; the per-user key is 0600 in a 0700 dir.
#  b. tcp with SL_JOB_SECRET: a client that speaks the protocol without the
#     secret never receives a byte of the id, and takes no rank's place (the
#     real rank 1 joins after it);
#  d. and a real rank with another secret fails within seconds, saying the
#     ranks do not share one secret; a secret too short is refused (exit 2).
#  c. fs, 3 ranks, umask 022: while the rendezvous is open, every file beside
#     it (the id, the key file, the acks) is mode 0600; the key file is
#     created O_EXCL with mode 0600 and never chmod'ed (strace, when it runs
#     here); afterwards nothing is left; with SL_JOB_SECRET no key file is
#     written and a rank with another secret fails at once.
source "${SL_SRC:?}/tests/lib/run.sh" rendezvous
H=$SL_BUILD/tests/test_rendezvous
[ -x "$H" ] || skip "$H not built"
unset SL_JOB_SECRET SLURM_JOB_ID TORCHELASTIC_RUN_ID SL_RANK SL_WORLD_SIZE SL_LOCAL_RANK SL_INIT_METHOD \
  RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT SLURM_PROCID SLURM_NTASKS SLURM_LOCALID
export HOME=$W/home # the per-user key of tcp without a secret
mkdir -p "$HOME"
umask 022
T=10 # a rank's rendezvous timeout: only a failure waits for it
SEED=7
ID=$("$H" id $SEED)
t_all=$(date +%s)

# waitfor SECONDS CMD...: polls CMD every 20 ms
waitfor() {
  local n=$(($1 * 50))
  shift
  while [ $n -gt 0 ]; do
    "$@" && return 0
    sleep 0.02
    n=$((n - 1))
  done
  return 1
}
# has_id LOG: the rank printed rank 0's id
has_id() { grep -q "id $ID\$" "$1"; }
# ranks_ok NAME PID:LOG...: each exits 0 with rank 0's id
ranks_ok() {
  local name=$1 bad_=""
  shift
  for pl in "$@"; do
    wait "${pl%%:*}"
    local rc=$?
    if [ $rc -ne 0 ] || ! has_id "${pl#*:}"; then
      bad_="$bad_ $(basename "${pl#*:}") (exit $rc)"
      sed 's/^/     /' "${pl#*:}" | tail -n 3 | cut -c1-300
    fi
  done
  if [ -z "$bad_" ]; then ok "$name: every rank has rank 0's id"; else bad "$name: no id on$bad_"; fi
}
# logged_once LOG ADDR NEEDLE WHAT: LOG has exactly one drop line for ADDR, holding NEEDLE
logged_once() {
  local n
  n=$(grep -cF "dropped a connection from $2: " "$1")
  if [ "$n" = 1 ] && grep -F "dropped a connection from $2: " "$1" | grep -qF -- "$3"; then
    ok "$4: logged once: $(grep -F "from $2: " "$1" | sed 's/.*dropped/dropped/' | cut -c1-150)"
  else
    bad "$4: $n drop lines name $2 (expected 1 with '$3')"
    sed 's/^/     /' "$1" | tail -n 5
  fi
}
stray_addr() { sed -n 's/^stray from \([0-9.]*:[0-9]*\)$/\1/p' "$1" | head -n 1; }

# ---- a. strays during a tcp rendezvous (torchrun's variables, no secret) ----
P=$("$H" port)
A=127.0.0.1:$P
torch_env() { env RANK="$1" WORLD_SIZE="$2" MASTER_ADDR=127.0.0.1 MASTER_PORT="$P" "${@:3}"; }
torch_env 0 3 "$H" rank $SEED $T > "$W/a0.log" 2>&1 &
p0=$!
timeout 30 "$H" stray "$A" close > "$W/s1.log" 2>&1
timeout 30 "$H" stray "$A" garbage > "$W/s2.log" 2>&1
timeout 30 "$H" stray "$A" silent > "$W/s3.log" 2>&1 &
ps3=$!
waitfor 10 grep -q "^stray from" "$W/s3.log"
t0=$(date +%s%N)
torch_env 1 3 "$H" rank $SEED $T > "$W/a1.log" 2>&1 &
p1=$!
torch_env 2 3 "$H" rank $SEED $T > "$W/a2.log" 2>&1 &
p2=$!
ranks_ok "a. tcp, 3 ranks, 3 strays" $p0:"$W/a0.log" $p1:"$W/a1.log" $p2:"$W/a2.log"
ms=$((($(date +%s%N) - t0) / 1000000))
[ $ms -lt 10000 ] && ok "a. the ranks finished ${ms} ms after they started" || bad "a. the ranks took ${ms} ms"
wait $ps3
logged_once "$W/a0.log" "$(stray_addr "$W/s1.log")" "closed without sending anything" "a. the stray that closed"
logged_once "$W/a0.log" "$(stray_addr "$W/s2.log")" '"GET /health HTTP' "a. the stray that sent garbage"
logged_once "$W/a0.log" "$(stray_addr "$W/s3.log")" "still unauthenticated" "a. the silent stray"
n=$(grep -c "dropped a connection" "$W/a0.log")
[ "$n" = 3 ] && ok "a. 3 drop lines in all" || bad "a. $n drop lines, expected 3"
k=$HOME/.shardlm/boot-key
m=$(stat -c %a "$k" 2> /dev/null)/$(stat -c %a "$HOME/.shardlm" 2> /dev/null)
[ "$m" = 600/700 ] && ok "a. the per-user key is 0600 in a 0700 directory" || bad "a. per-user key / dir modes: $m"

# ---- b, d. a job secret: an impostor, a rank with another secret ----
export SL_JOB_SECRET=test-rendezvous-secret-0123456789
P=$("$H" port)
A=127.0.0.1:$P
torch_env 0 2 "$H" rank $SEED $T > "$W/b0.log" 2>&1 &
p0=$!
timeout 30 "$H" impostor "$A" 1 2 $SEED > "$W/imp.log" 2>&1
if grep -q "received [1-9][0-9]* bytes, id seen: no" "$W/imp.log"; then
  ok "b. the impostor never receives the id: $(sed 's/.*: received/received/' "$W/imp.log")"
else
  bad "b. the impostor: $(cat "$W/imp.log")"
fi
logged_once "$W/b0.log" "$(sed -n 's/^impostor from \([0-9.]*:[0-9]*\):.*/\1/p' "$W/imp.log")" \
  "does not hold the job secret" "b. the impostor"
t0=$(date +%s%N)
torch_env 1 2 env SL_JOB_SECRET=another-secret-0123456789 timeout 30 "$H" rank $SEED $T > "$W/bw.log" 2>&1
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $rc = 1 ] && [ $ms -lt 5000 ] && grep -q "do not share one secret" "$W/bw.log" && ! has_id "$W/bw.log"; then
  ok "d. a rank with another secret fails in ${ms} ms: $(sed 's/.*refused/refused/' "$W/bw.log" | cut -c1-110)"
else
  bad "d. a rank with another secret: exit $rc after ${ms} ms: $(cut -c1-300 "$W/bw.log")"
fi
torch_env 1 2 "$H" rank $SEED $T > "$W/b1.log" 2>&1 &
p1=$!
ranks_ok "b. tcp with SL_JOB_SECRET, after the impostor and the wrong secret" $p0:"$W/b0.log" $p1:"$W/b1.log"
n=$(grep -c "does not hold the job secret" "$W/b0.log")
[ "$n" = 2 ] && ok "b. rank 0 logged both failed proofs" || bad "b. $n failed-proof lines, expected 2"
torch_env 1 2 env SL_JOB_SECRET=short timeout 30 "$H" rank $SEED 2 > "$W/short.log" 2>&1
rc_is "d. SL_JOB_SECRET of 5 characters" $? 2 "$W/short.log" "SL_JOB_SECRET is 5 characters: it needs at least 16"
unset SL_JOB_SECRET

# ---- c. fs: file modes while the rendezvous is open ----
D=$W/rdv
mkdir -p "$D"
F=$D/nccl-id
fsr() { env SL_RANK="$1" SL_WORLD_SIZE="$2" SL_INIT_METHOD="fs:$F" "${@:3}"; }
ST=()
if strace -f -qq -o /dev/null true 2> /dev/null; then
  # LeakSanitizer cannot run under ptrace (a -DSL_SANITIZE build)
  ST=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -qq -e trace=open,openat,creat,chmod,fchmod,fchmodat,link,linkat -o "$W/strace.log")
fi
fsr 1 3 "${ST[@]}" "$H" rank $SEED $T > "$W/c1.log" 2>&1 & # rank 1 first: it makes the key file
p1=$!
waitfor 10 test -e "$F.key"
fsr 0 3 "$H" rank $SEED $T > "$W/c0.log" 2>&1 &
p0=$!
waitfor 10 test -e "$F.ack.1"
modes=$(cd "$D" && stat -c '%n %a' -- * 2> /dev/null | sort | tr '\n' ' ')
other=$(cd "$D" && stat -c '%n %a' -- * 2> /dev/null | grep -v ' 600$')
if [ -e "$F" ] && [ -e "$F.key" ] && [ -e "$F.ack.1" ] && [ -z "$other" ]; then
  ok "c. open fs rendezvous, every file 0600: $modes"
else
  bad "c. open fs rendezvous: $modes"
fi
fsr 2 3 "$H" rank $SEED $T > "$W/c2.log" 2>&1 &
p2=$!
ranks_ok "c. fs, 3 ranks" $p0:"$W/c0.log" $p1:"$W/c1.log" $p2:"$W/c2.log"
left=$(ls -A "$D")
[ -z "$left" ] && ok "c. nothing is left beside the rendezvous" || bad "c. left behind: $left"
if [ ${#ST[@]} -gt 0 ]; then
  creat=$(grep -E 'O_CREAT' "$W/strace.log" | grep -F "$F")
  if echo "$creat" | grep -q 'nccl-id.key.tmp.*O_EXCL.*, 0600)' && ! echo "$creat" | grep -qv ', 0600)' &&
    ! grep -qE '^[0-9]+ +(chmod|fchmod|fchmodat)\(' "$W/strace.log" &&
    grep -qE 'link(at)?\(.*nccl-id.key.tmp.*nccl-id.key"' "$W/strace.log"; then
    ok "c. (strace) the key file is made O_EXCL, mode 0600, then linked; no chmod; every O_CREAT is 0600"
  else
    bad "c. (strace) file creation:"
    grep -E 'O_CREAT|chmod|link' "$W/strace.log" | sed 's/^/     /' | head -n 8
  fi
else
  echo "     (strace does not run here: the key file's creation mode is checked by the modes above only)"
fi
export SL_JOB_SECRET=test-rendezvous-secret-0123456789
fsr 0 2 "$H" rank $SEED $T > "$W/e0.log" 2>&1 &
p0=$!
waitfor 10 test -e "$F"
m=$(stat -c %a "$F")
[ "$m" = 600 ] && [ ! -e "$F.key" ] && ok "c. with SL_JOB_SECRET: the id file is 0600 and no key file is written" ||
  bad "c. with SL_JOB_SECRET: mode $m, key file: $(ls "$F.key" 2>&1)"
t0=$(date +%s%N)
fsr 1 2 env SL_JOB_SECRET=another-secret-0123456789 timeout 30 "$H" rank $SEED $T > "$W/ew.log" 2>&1
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $rc = 1 ] && [ $ms -lt 5000 ] && grep -q "not written with this rank's job secret" "$W/ew.log"; then
  ok "d. fs: a rank with another secret fails in ${ms} ms"
else
  bad "d. fs: a rank with another secret: exit $rc after ${ms} ms: $(cut -c1-300 "$W/ew.log")"
fi
fsr 1 2 "$H" rank $SEED $T > "$W/e1.log" 2>&1 &
p1=$!
ranks_ok "c. fs with SL_JOB_SECRET" $p0:"$W/e0.log" $p1:"$W/e1.log"
echo "     ($(($(date +%s) - t_all)) s in all)"
finish
