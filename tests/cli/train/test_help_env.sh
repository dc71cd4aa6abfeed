#!/usr/bin/env bash
# `shardlm --help-env` (and `shardlm train --help-env`) lists base/env.c's
# table. Checked against the source: every SL_* name read by getenv or
# sl_env_* in the library and the tools is a row of the listing, every other
# variable getenv reads is listed as read from the launcher, every row is read
# somewhere, and no SL_* getenv / setenv bypasses the table (the lookup of a
# name missing from the table aborts, so a name that is only in the source
# would abort a run), and engine/ names no CUDA variable.
source "${SL_SRC:?}/tests/lib/run.sh" help_env
DIRS="base kernels shard offload formats data models plan engine tools"
cd "$SL_SRC" || exit 1

"$B" --help-env > "$W/top.txt" 2> "$W/top.err"
rc_is "shardlm --help-env" $? 0 "$W/top.txt" "environment variables"
"$B" train --help-env > "$W/train.txt" 2> "$W/train.err"
rc_is "shardlm train --help-env" $? 0 "$W/train.txt" "read from the launcher"
if cmp -s "$W/top.txt" "$W/train.txt"; then ok "the two listings are the same"; else bad "--help-env differs"; fi

# the table's rows: "  NAME  TYPE  DEFAULT  doc" before the launcher section
sed -n '/^read from the launcher/q; s/^  \(SL_[A-Z0-9_]*\) .*/\1/p' "$W/top.txt" | sort -u > "$W/rows"
sed -n '/^read from the launcher/,$p' "$W/top.txt" > "$W/launcher"
[ "$(wc -l < "$W/rows")" -ge 20 ] && ok "$(wc -l < "$W/rows") SL_* rows" || bad "only $(wc -l < "$W/rows") SL_* rows"
if grep -qE '^  SL_[A-Z0-9_]+ +(string|int|double|bool) +[^ ]+ +[^ ]' "$W/top.txt"; then ok "rows have type, default, doc"
else bad "rows lack type / default / doc"; fi

# every SL_* name in a getenv / sl_env_* call of the source is a row
# shellcheck disable=SC2086
grep -rhoE '(getenv|sl_env_[a-z]+)\("SL_[A-Z0-9_]+"' $DIRS | sed 's/.*("//; s/"$//' | sort -u > "$W/read"
[ -s "$W/read" ] || bad "grep found no sl_env_* call in the source"
missing=$(comm -23 "$W/read" "$W/rows")
if [ -z "$missing" ]; then ok "every SL_* name read ($(wc -l < "$W/read")) is in the table"
else bad "read but not in base/env.c's table: $missing"; fi

# every row is read somewhere (as a string literal outside base/env.c)
stale=""
while read -r n; do
  # shellcheck disable=SC2086
  grep -rqF --exclude=env.c "\"$n\"" $DIRS || stale="$stale $n"
done < "$W/rows"
if [ -z "$stale" ]; then ok "every row is read by the source"; else bad "rows nothing reads:$stale"; fi

# every other variable getenv reads is listed as read from the launcher
# shellcheck disable=SC2086
grep -rhoE 'getenv\("[A-Z][A-Z0-9_]*"' $DIRS | sed 's/.*("//; s/"$//' | grep -v '^SL_' | sort -u > "$W/other"
# shellcheck disable=SC2086
grep -rhoE '"(OMPI|PMIX?|MPI|SLURM)_[A-Z0-9_]*"' $DIRS | tr -d '"' | sort -u >> "$W/other"
unlisted=""
while read -r n; do grep -qw -- "$n" "$W/launcher" || unlisted="$unlisted $n"; done < <(sort -u "$W/other")
if [ -z "$unlisted" ]; then ok "every launcher variable read ($(sort -u "$W/other" | wc -l)) is listed"
else bad "read with getenv but not listed:$unlisted"; fi

# nothing reads or sets an SL_* variable around the table
# shellcheck disable=SC2086
around=$(grep -rnE '(getenv|setenv|putenv|unsetenv)\("SL_' $DIRS | grep -v '^base/env\.c:')
if [ -z "$around" ]; then ok "no getenv/setenv(\"SL_...\") outside base/env.c"; else bad "bypasses the table: $around"; fi

# the trainer names no CUDA variable: the backend's registry row does (kernels/registry.c)
around=$(grep -rnE '"(SL_)?CUDA_' engine)
if [ -z "$around" ]; then ok "no CUDA environment name in engine/"; else bad "CUDA names in engine/: $around"; fi

finish
