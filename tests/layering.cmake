# The layering check (ctest: layering), run as
#   cmake -DTFM_SRC=<source>/src -P tests/layering.cmake
#
# Every file under src/ belongs to the layer named by its first folder;
# src/sources.cmake's TFM_LAYERS orders the layers, lowest first.  A file may
# include the public headers ("transformer/...") and the headers of its own
# layer and of the layers before it, each named from src/ ("base/alloc.h");
# an include of a later layer's header, or of a header named otherwise
# (a bare "alloc.h" would depend on include paths), fails the check with
# the file, the line and both layers.
if(NOT TFM_SRC)
  message(FATAL_ERROR "usage: cmake -DTFM_SRC=<source>/src -P layering.cmake")
endif()
include("${TFM_SRC}/sources.cmake")

file(GLOB_RECURSE _files RELATIVE "${TFM_SRC}" "${TFM_SRC}/*.c" "${TFM_SRC}/*.h")
set(_bad 0)
set(_checked 0)
foreach(_f IN LISTS _files)
  string(REGEX MATCH "^[^/]+" _own "${_f}")
  list(FIND TFM_LAYERS "${_own}" _own_rank)
  if(_own_rank LESS 0)
    message(NOTICE "layering: " "src/${_f}: in no layer of TFM_LAYERS (${TFM_LAYERS})")
    math(EXPR _bad "${_bad} + 1")
    continue()
  endif()
  file(STRINGS "${TFM_SRC}/${_f}" _incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(_inc IN LISTS _incs)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" _path "${_inc}")
    if(_path MATCHES "^transformer/")
      continue()
    endif()
    string(REGEX MATCH "^[^/]+" _their "${_path}")
    list(FIND TFM_LAYERS "${_their}" _their_rank)
    if(_their_rank LESS 0 OR NOT _path MATCHES "/")
      message(NOTICE "layering: " "src/${_f}: #include \"${_path}\" names no layer: "
                         "include internal headers as \"<layer>/<file>.h\"")
      math(EXPR _bad "${_bad} + 1")
    elseif(NOT EXISTS "${TFM_SRC}/${_path}")
      message(NOTICE "layering: " "src/${_f}: #include \"${_path}\": no such file under src/")
      math(EXPR _bad "${_bad} + 1")
    elseif(_their_rank GREATER _own_rank)
      message(NOTICE "layering: " "src/${_f} (layer ${_own}) includes \"${_path}\" "
                         "of layer ${_their}, which comes after it in TFM_LAYERS")
      math(EXPR _bad "${_bad} + 1")
    endif()
    math(EXPR _checked "${_checked} + 1")
  endforeach()
endforeach()
list(LENGTH _files _n)
if(_bad GREATER 0)
  message(FATAL_ERROR "layering: ${_bad} include(s) break the layer order")
endif()
message(STATUS "layering: ${_n} files, ${_checked} internal includes, all in layer order (${TFM_LAYERS})")
