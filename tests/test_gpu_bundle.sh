#!/usr/bin/env bash
# tools/gpu-bundle (docs/cuda.md, "GPU window"): builds the bundle of a CUDA
# build into a temporary folder and checks that it stays under the size
# limit, that it unpacks, and that every bundled binary resolves every
# library that is not the C runtime or CUDA/NCCL from the bundle itself
# (ldd with LD_LIBRARY_PATH empty: such a library found elsewhere, or not
# found at all, is a failure), that no bundled library needs one from
# outside either, and that the bundled shardlm runs (--help).
# Skips (77) on a build without CUDA (no test_cuda_kernels) or without patchelf.
set -u
S=${SL_SRC:?}
BLD=${SL_BUILD:?}
[ -x "$BLD/tests/test_cuda_kernels" ] || { echo "not a CUDA build: skipped"; exit 77; }
command -v patchelf > /dev/null || { echo "patchelf missing: skipped"; exit 77; }
W=$(mktemp -d /tmp/sl-gpubundle.XXXXXX)
trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }
LIMIT=48
if "$S/tools/gpu-bundle" --build "$BLD" --dest "$W/out" --limit-mib $LIMIT > "$W/log" 2>&1; then
  ok "gpu-bundle: $(tail -1 "$W/log" | sed 's/^gpu-bundle: //')"
else
  bad "gpu-bundle failed"; cat "$W/log"
fi
size=$(du -sb "$W/out" 2> /dev/null | cut -f1)
if [ -n "$size" ] && [ "$size" -le $((LIMIT * 1048576)) ]; then ok "size $size bytes <= $LIMIT MiB"
else bad "size ${size:-?} bytes over $LIMIT MiB"; fi
mkdir -p "$W/x"
if tar -C "$W/x" -xzf "$W/out/shardlm-gpu.tar.gz" && [ -x "$W/x/shardlm-gpu/shardlm" ]; then ok "unpacks"
else bad "does not unpack"; fi
D="$W/x/shardlm-gpu"
SYS_RE='^(ld-linux.*|libc|libm|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.so'
CUDA_RE='^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-[a-z-]*|nvrtc|nvJitLink|cudnn|cufft|curand|cusparse|cusolver)\.so'
DR=$(realpath "$D")
nb=0
for f in "$D"/shardlm "$D"/tests/* "$D"/lib/*; do
  [ -f "$f" ] || continue
  nb=$((nb+1))
  bad_here=""
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $CUDA_RE ]] && continue
    if [[ "$name" =~ $SYS_RE ]]; then [ "$path" = "not" ] && bad_here+=" $name(not found)"; continue; fi
    real=$(realpath -m "$path")
    case "$real" in "$DR"/lib/*) ;; *) bad_here+=" $name($path)" ;; esac
  done < <(LD_LIBRARY_PATH= ldd "$f" 2>&1)
  if [ -n "$bad_here" ]; then bad "${f#$D/} resolves outside the bundle:$bad_here"; fi
done
nbad=$fail
[ $nb -ge 5 ] && [ $nbad -eq 0 ] && ok "$nb files: every non-CUDA library resolves inside the bundle"
[ $nb -ge 5 ] || bad "only $nb files in the bundle"
if "$D/shardlm" --help > /dev/null 2>&1; then ok "bundled shardlm --help runs"; else bad "bundled shardlm does not run"; fi
grep -q "glibc >=" "$W/out/MANIFEST.txt" && ok "MANIFEST names the glibc it needs" || bad "MANIFEST incomplete"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
