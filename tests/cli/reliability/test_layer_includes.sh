#!/usr/bin/env bash
# The include half of the layer check (cmake/include_check.cmake, run by
# every build): a layer's sources may #include only the layers its library
# links. Run as the build runs it for shard/ (its ALLOWED list read from the
# build's own rule), on a tree whose other layers are the real ones: shard/
# as it is passes; with a planted upward include (shard/ including
# models/model.h, header-only, which the link-time check cannot see) it
# fails, naming the file and the line. < 1 s.
source "${SL_SRC:?}/tests/lib/run.sh" layer_includes
mk=$SL_BUILD/CMakeFiles/sl_shard_includes.dir/build.make
allowed=$(grep -o -- '-DALLOWED=[^" ]*' "$mk" 2> /dev/null | head -1 | cut -d= -f2)
[ -n "$allowed" ] || skip "no layer check rule for shard/ in $mk (not a Makefile build)"
R=$W/root
mkdir -p "$R"
for d in "$SL_SRC"/*/; do
  [ -f "$d/CMakeLists.txt" ] && ln -s "${d%/}" "$R/$(basename "$d")"
done
rm "$R/shard" && cp -r "$SL_SRC/shard" "$R/shard"
check() { cmake -DROOT="$R" -DLAYER=shard "-DALLOWED=$allowed" -P "$SL_SRC/cmake/include_check.cmake" > "$W/out.txt" 2>&1; }
if check; then ok "shard/ as it is passes (it may include ${allowed//|/, })"; else bad "shard/ fails as it is"; cat "$W/out.txt"; fi
printf '#include "models/model.h"\n' > "$R/shard/planted.h"
if check; then bad "a planted upward include (shard/ -> models/) passes the layer check"
elif grep -q 'shard/planted.h: #include "models/model.h"' "$W/out.txt"; then
  ok "a planted upward include fails: $(grep -m1 'planted' "$W/out.txt" | sed 's/^ *//')"
else bad "the planted include failed without naming it"; cat "$W/out.txt"; fi
finish
