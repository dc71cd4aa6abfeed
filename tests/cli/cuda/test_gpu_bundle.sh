#!/usr/bin/env bash
# tools/gpu-bundle (docs/cuda.md, "GPU window"): builds the bundle of a CUDA
# build into a temporary folder and checks that it stays under the size
# limit, that it unpacks, and that every bundled binary resolves every
# library that is not the C runtime or CUDA/NCCL from the bundle itself
# (ldd with LD_LIBRARY_PATH empty: such a library found elsewhere, or not
# found at all, is a failure), that no bundled library needs one from
# outside either, that the bundled shardlm runs (--help) and trains at
# world size 1 on the CPU backend without the MPI module (not bundled).
# On a build without CUDA it bundles the CPU binaries (--allow-cpu), which
# checks the same mechanics. Skips (77) without patchelf or test binaries.
source "${SL_SRC:?}/tests/lib/run.sh" gpu_bundle
S=$SL_SRC
BLD=$SL_BUILD
[ -x "$BLD/tests/test_cuda_kernels" ] || skip "no test binaries"
ALLOW=""
ldd "$BLD/tests/test_cuda_kernels" | grep -q libcudart || { ALLOW="--allow-cpu"; echo "info: a build without CUDA (--allow-cpu)"; }
command -v patchelf > /dev/null || skip "patchelf missing"
LIMIT=48
if "$S/tools/gpu-bundle" --build "$BLD" --dest "$W/out" --limit-mib $LIMIT $ALLOW > "$W/log" 2>&1; then
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
# the bundle has no MPI module: a world-size-1 run must not need it
tiny_model "$W/m" llama '"num_hidden_layers": 1, "rms_norm_eps": null, "rope_theta": null, "tie_word_embeddings": null'
# (the bundled binary prepares the data, not $B: so not tiny_data)
if env -u OMPI_COMM_WORLD_SIZE -u SL_COMM "$D/shardlm" prepare --input "$S/configs/corpus.txt" --output "$W/d" > /dev/null 2>&1 &&
   env -u OMPI_COMM_WORLD_SIZE -u SL_COMM "$D/shardlm" train --backend cpu --model "$W/m" --init random --data "$W/d" --steps 2 \
     --micro-batch 2 --seq-len 16 --threads 1 --summary false --plot false --out-dir "$W/r" > "$W/train.log" 2>&1; then
  ok "bundled shardlm trains at world size 1 (no MPI module in the bundle)"
else bad "bundled shardlm train failed"; tail -3 "$W/train.log"; fi
grep -q "glibc >=" "$W/out/MANIFEST.txt" && ok "MANIFEST names the glibc it needs" || bad "MANIFEST incomplete"
finish
