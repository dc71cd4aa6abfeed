# tests/lib/harden_check.sh — sourced after tests/lib/run.sh by the
# tests/cli/reliability/test_harden_check_*.sh: `expect` (a command's exit
# status and a needle in its output), `no` (a failure with its log) and
# tiny_config (a 1-layer Llama).
k=0
no() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "${2:-}" ] && tail -n 4 "$2" | sed 's/^/     /'; return 0; }
# expect NAME WANT NEEDLE CMD...: CMD must exit WANT (timeout 120 s) with
# NEEDLE (fixed string, may be empty) in its stdout/stderr; the matching line
# is shown. The output stays in $W/log$k.
expect() {
  local name=$1 want=$2 needle=$3; shift 3
  k=$((k + 1))
  timeout 120 "$@" > "$W/log$k" 2>&1
  local rc=$?
  if [ $rc -ne "$want" ]; then no "$name: exit $rc, expected $want" "$W/log$k"
  elif [ -n "$needle" ] && ! grep -qF -- "$needle" "$W/log$k"; then no "$name: output does not name '$needle'" "$W/log$k"
  else
    ok "$name"
    [ -n "$needle" ] && grep -m1 -F -- "$needle" "$W/log$k" | cut -c1-220 | sed 's/^/     /'
  fi
  return 0
}
# tiny_config DIR [EXTRA JSON MEMBERS]: a 1-layer Llama, hidden 32, vocab 300
tiny_config() {
  tiny_model "$1" llama '"num_hidden_layers": 1, "rope_theta": null, "tie_word_embeddings": null'"${2:+, $2}"
}
