# cmake -P cmake/include_check.cmake -DROOT=DIR -DLAYER=NAME -DALLOWED=a|b|c
# The include half of the layer check (CMakeLists.txt sl_include_check): a
# source of layer NAME (the directory ROOT/NAME) may #include "X/..." only for
# X = NAME or a layer it links (ALLOWED), so a header-only include upward
# (shard/ including models/) fails the build as an upward call does.
cmake_policy(SET CMP0057 NEW)
string(REPLACE "|" ";" allowed "${ALLOWED}")
file(GLOB layers RELATIVE ${ROOT} ${ROOT}/*)
file(GLOB_RECURSE srcs ${ROOT}/${LAYER}/*.c ${ROOT}/${LAYER}/*.h ${ROOT}/${LAYER}/*.cu ${ROOT}/${LAYER}/*.cuh
     ${ROOT}/${LAYER}/*.cpp)
set(bad "")
foreach(src ${srcs})
  file(STRINGS ${src} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/.*" "\\1" dir "${line}")
    if(NOT dir STREQUAL LAYER AND NOT dir IN_LIST allowed AND IS_DIRECTORY ${ROOT}/${dir}
       AND EXISTS ${ROOT}/${dir}/CMakeLists.txt)
      file(RELATIVE_PATH rel ${ROOT} ${src})
      string(APPEND bad "  ${rel}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" " " allowed_txt "${allowed}")
  message(FATAL_ERROR "layer check: ${LAYER}/ includes a layer it does not link (it may include ${allowed_txt}):\n${bad}")
endif()
