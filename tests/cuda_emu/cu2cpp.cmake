# tests/cuda_emu/cu2cpp.cmake — turns a CUDA source into host C++ for the
# emulator: `k<<<g, b, smem, s>>>(args)` becomes `k * sl_emu_cfg(g, b, smem,
# s)(args)` (include/sl_emu.h), `extern __shared__ T name[];` a pointer to the
# block's dynamic shared memory. A #line keeps diagnostics on the .cu file.
# Usage: cmake -DIN=x.cu -DOUT=x.cpp -DROOT=<source dir> -P cu2cpp.cmake
file(READ "${IN}" s)
string(REPLACE "<<<" " * sl_emu_cfg(" s "${s}")
string(REPLACE ">>>" ")" s "${s}")
string(REGEX REPLACE
  "extern[ \t]+__shared__[ \t]+(__align__\\([0-9]+\\)[ \t]+)?([A-Za-z_][A-Za-z_0-9 \t]*[A-Za-z_0-9])[ \t]+([A-Za-z_][A-Za-z_0-9]*)[ \t]*\\[[ \t]*\\][ \t]*;"
  "\\2 *\\3 = (\\2 *)sl_emu::dyn_smem();" s "${s}")
file(RELATIVE_PATH rel "${ROOT}" "${IN}") # messages name kernels/cuda/x.cu
file(WRITE "${OUT}.tmp" "#line 1 \"${rel}\"\n${s}")
file(RENAME "${OUT}.tmp" "${OUT}")
