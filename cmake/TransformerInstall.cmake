# Installation of the library and everything a consumer needs to build
# against it (docs/ABI.md, docs/INSTALL.md "The Debian
# packages"):
#
#   <libdir>/libtransformer.so.1.M.P           runtime (component Runtime)
#   <libdir>/libtransformer.so.1               soname link (Runtime)
#   <libdir>/libtransformer.so                 link for -ltransformer (Development)
#   <includedir>/transformer/*.h               public headers (Development)
#   <libdir>/pkgconfig/transformer.pc          pkg-config (Development)
#   <libdir>/cmake/transformer/                find_package(transformer) (Development)
#
# <libdir> is CMAKE_INSTALL_LIBDIR from GNUInstallDirs: lib/<multiarch> on
# Debian with prefix /usr (dh passes it explicitly), lib otherwise.  The
# command-line program, the model and the bindings install themselves
# (tools/, bindings/python/, bindings/lua/); TRANSFORMER_INSTALL_BIN_RPATH
# (below) is the RUNPATH of the installed program.

include(CMakePackageConfigHelpers)

set(TRANSFORMER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/transformer"
    CACHE STRING "Where transformerConfig.cmake is installed (relative to the prefix)")
set(TRANSFORMER_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
    CACHE STRING "Where transformer.pc is installed (relative to the prefix)")

install(TARGETS transformer
  EXPORT transformerTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
          COMPONENT Runtime
          NAMELINK_COMPONENT Development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT Runtime)
# (The exported target's include directory comes from the
# $<INSTALL_INTERFACE:...> of target_include_directories in src/.)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/transformer"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  COMPONENT Development
  FILES_MATCHING PATTERN "*.h")

# ---- RUNPATH of installed programs ------------------------------------------
# An installed executable (transformer-generate, tools/) finds
# libtransformer.so.1 relative to itself: $ORIGIN/<libdir relative to
# bindir>, e.g. $ORIGIN/../lib, so that `cmake --install --prefix DIR` (any
# DIR, also one other than the configured prefix) and a moved prefix work
# without LD_LIBRARY_PATH.  Programs add it with
#   set_target_properties(T PROPERTIES INSTALL_RPATH "${TRANSFORMER_INSTALL_BIN_RPATH}")
# The Debian build (debian/rules) configures with CMAKE_SKIP_INSTALL_RPATH=ON,
# as for the bindings' $ORIGIN rpaths: in /usr the library is on the default
# search path, and lintian rejects custom library search paths.
file(RELATIVE_PATH _tfm_bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}"
     "${CMAKE_INSTALL_FULL_LIBDIR}")
if(_tfm_bin_to_lib STREQUAL "")
  set(TRANSFORMER_INSTALL_BIN_RPATH "$ORIGIN")
else()
  set(TRANSFORMER_INSTALL_BIN_RPATH "$ORIGIN/${_tfm_bin_to_lib}")
endif()

# ---- CMake package: find_package(transformer 1) -> transformer::transformer
install(EXPORT transformerTargets
  NAMESPACE transformer::
  FILE transformerTargets.cmake
  DESTINATION "${TRANSFORMER_INSTALL_CMAKEDIR}"
  COMPONENT Development)
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/transformerConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/transformerConfig.cmake"
  INSTALL_DESTINATION "${TRANSFORMER_INSTALL_CMAKEDIR}")
# A program built against 1.x runs with any later 1.y (docs/ABI.md), so
# any 1.y >= the requested version satisfies find_package(transformer 1.x).
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/transformerConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/cmake/transformerConfig.cmake"
  "${PROJECT_BINARY_DIR}/cmake/transformerConfigVersion.cmake"
  DESTINATION "${TRANSFORMER_INSTALL_CMAKEDIR}"
  COMPONENT Development)

# ---- pkg-config ---------------------------------------------------------
# Written at install time, so that the prefix in the file is the one the
# files really go to (`cmake --install --prefix P` included).  OpenBLAS,
# cJSON, PCRE2, utf8proc, libm and threads appear only in Libs.private: the
# public headers expose none of them, a program that uses only tfm_
# functions links with -ltransformer alone, and `pkg-config --cflags` gives
# only the include directory.  (Requires.private would leak their Cflags,
# such as OpenBLAS's include directory and -DUTF8PROC_EXPORTS, into every
# consumer's --cflags.)  The linker flags are those pkg-config gave the
# build for each dependency.
set(_tfm_pc_libs_private "")
foreach(_dep OPENBLAS CJSON PCRE2 UTF8PROC)
  list(APPEND _tfm_pc_libs_private ${${_dep}_LDFLAGS})
endforeach()
list(REMOVE_DUPLICATES _tfm_pc_libs_private)
list(JOIN _tfm_pc_libs_private " " _tfm_pc_libs_private)
install(CODE "
  set(_tfm_pc_libs_private \"${_tfm_pc_libs_private}\")
  set(_tfm_pc_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(_tfm_pc_libdir \"${CMAKE_INSTALL_LIBDIR}\")
  set(_tfm_pc_includedir \"${CMAKE_INSTALL_INCLUDEDIR}\")
  foreach(_v libdir includedir)
    if(NOT IS_ABSOLUTE \"\${_tfm_pc_\${_v}}\")
      set(_tfm_pc_\${_v} \"\\\${prefix}/\${_tfm_pc_\${_v}}\")
    endif()
  endforeach()
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  set(PROJECT_DESCRIPTION \"${PROJECT_DESCRIPTION}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/transformer.pc.in\"
                 \"${PROJECT_BINARY_DIR}/cmake/transformer.pc\" @ONLY)
" COMPONENT Development)
install(FILES "${PROJECT_BINARY_DIR}/cmake/transformer.pc"
  DESTINATION "${TRANSFORMER_INSTALL_PKGCONFIGDIR}"
  COMPONENT Development)
