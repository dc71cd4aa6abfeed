# tests/lib/harden_check.sh — sourced by tests/test_harden_check_*.sh: pass/fail
# counters, `expect` (a command's exit status and a needle in its output),
# a tiny Llama config.json and the closing line. Needs $W (a scratch dir).
pass=0; fail=0; k=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
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
  mkdir -p "$1"
  cat > "$1/config.json" <<J
{"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
 "vocab_size": 300, "rms_norm_eps": 1e-5${2:+, $2}}
J
}
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; }
