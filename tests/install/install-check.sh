#!/usr/bin/env bash
# The install_consumers test: `cmake --install` of the build into a fresh
# temporary prefix, a look at what landed where, then two out-of-tree
# programs built against that prefix, one with find_package(transformer)
# (tests/install/find_package/) and one with pkg-config
# (tests/install/pkg_config/); both must run and print OK.  The bindings
# and the command-line program, when built, are loaded from the prefix too,
# without LD_LIBRARY_PATH (they find the library through their RUNPATH).
#
# tests/install/CMakeLists.txt passes everything as environment variables:
#   BUILD_DIR SOURCE_DIR WORK_DIR CMAKE_COMMAND CMAKE_GENERATOR CC
#   LIBDIR INCLUDEDIR BINDIR DATADIR CMAKEDIR PKGCONFIGDIR (relative to the
#   prefix) VERSION SOVERSION, and optionally
#   PYTHON PYTHON_DIR (Python package), LUA LUA_CMOD_DIR LUA_LMOD_DIR (Lua
#   module), CLI=1 (transformer-generate and the model).
set -euo pipefail

prefix="$WORK_DIR/prefix"
rm -rf "$WORK_DIR"
mkdir -p "$WORK_DIR"
cd "$WORK_DIR"
fail() { echo "install-check: FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

step "cmake --install $BUILD_DIR --prefix $prefix"
"$CMAKE_COMMAND" --install "$BUILD_DIR" --prefix "$prefix" > install.log
sed "s|$prefix|<prefix>|" install.log | sed -n 's/^-- Installing: //p'

step "the library and its soname links"
libdir="$prefix/$LIBDIR"
real="libtransformer.so.$VERSION"
[ -f "$libdir/$real" ] && [ ! -L "$libdir/$real" ] || fail "no $LIBDIR/$real"
[ "$(readlink "$libdir/libtransformer.so.$SOVERSION")" = "$real" ] \
  || fail "libtransformer.so.$SOVERSION is not a link to $real"
[ "$(readlink "$libdir/libtransformer.so")" = "libtransformer.so.$SOVERSION" ] \
  || fail "libtransformer.so is not a link to libtransformer.so.$SOVERSION"
soname=$(LC_ALL=C readelf -d "$libdir/$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libtransformer.so.$SOVERSION" ] || fail "SONAME is '$soname'"
echo "$LIBDIR/$real, SONAME $soname"

step "headers"
for h in "$SOURCE_DIR"/include/transformer/*.h; do
  cmp -s "$h" "$prefix/$INCLUDEDIR/transformer/$(basename "$h")" \
    || fail "$INCLUDEDIR/transformer/$(basename "$h") missing or different"
done
ls "$prefix/$INCLUDEDIR/transformer"

step "deprecated _ex twins warn; TFM_NO_DEPRECATED_WARNINGS silences them"
cat > deprecated.c <<'EOF_C'
#include <transformer/transformer.h>
int main(void)
{
    tfm_module *m = NULL;
    return tfm_mha_create_ex(8, 2, 0, 0, 1, NULL, &m) == TFM_OK ? 0 : 1;
}
EOF_C
if "$CC" -c -o deprecated.o -Werror=deprecated-declarations \
     -I"$prefix/$INCLUDEDIR" deprecated.c 2> deprecated.log; then
  fail "calling tfm_mha_create_ex gives no deprecation warning"
fi
grep -q "tfm_mha_create_v2" deprecated.log || { cat deprecated.log; fail "the warning does not name tfm_mha_create_v2"; }
"$CC" -c -o deprecated.o -Werror -Wall -DTFM_NO_DEPRECATED_WARNINGS \
  -I"$prefix/$INCLUDEDIR" deprecated.c || fail "TFM_NO_DEPRECATED_WARNINGS"
"$CC" -c -o deprecated.o -Werror -Wall -DTFM_ENABLE_EXPERIMENTAL \
  -DTFM_NO_DEPRECATED_WARNINGS -I"$prefix/$INCLUDEDIR" deprecated.c \
  || fail "the headers with TFM_ENABLE_EXPERIMENTAL"
echo "ok: $(grep -m1 "is deprecated" deprecated.log | sed 's/^[^ ]* //')"

step "pkg-config"
export PKG_CONFIG_PATH="$prefix/$PKGCONFIGDIR"
export PKG_CONFIG_LIBDIR="$prefix/$PKGCONFIGDIR:$(pkg-config --variable pc_path pkg-config)"
pkg-config --print-errors --exists transformer
libs=$(pkg-config --libs transformer)
static_libs=$(pkg-config --static --libs transformer)
cflags=$(pkg-config --cflags transformer | sed "s/[[:space:]]*$//")
echo "pkg-config --modversion: $(pkg-config --modversion transformer)"
echo "pkg-config --cflags: $cflags"
echo "pkg-config --libs: $libs"
echo "pkg-config --static --libs: $static_libs"
[ "$(pkg-config --modversion transformer)" = "$VERSION" ] || fail "wrong version"
[[ " $libs " == *" -ltransformer "* ]] || fail "--libs lacks -ltransformer"
[[ "$libs" != *openblas* && "$libs" != *cjson* ]] \
  || fail "OpenBLAS or cJSON in the public Libs"
[[ "$static_libs" == *openblas* ]] || fail "OpenBLAS missing from --static --libs"
# The public headers include none of the private dependencies: --cflags is
# the include directory alone, without OpenBLAS's or cJSON's include
# directories or utf8proc's -DUTF8PROC_EXPORTS.
shopt -s nocasematch
[[ "$cflags" != *openblas* && "$cflags" != *cjson* && "$cflags" != *utf8proc* \
   && "$cflags" != *pcre* ]] || fail "a private dependency in --cflags: $cflags"
shopt -u nocasematch
[ "$cflags" = "-I$prefix/$INCLUDEDIR" ] || fail "--cflags is '$cflags', not -I$prefix/$INCLUDEDIR"
[ "$(pkg-config --variable=libdir transformer)" = "$libdir" ] || fail "libdir"

step "find_package(transformer) consumer (tests/install/find_package)"
"$CMAKE_COMMAND" -S "$SOURCE_DIR/tests/install/find_package" -B fp \
  -G "$CMAKE_GENERATOR" -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  > fp-configure.log || { cat fp-configure.log; fail "configure"; }
grep "transformer " fp-configure.log
found=$(sed -n 's/^transformer_DIR:PATH=//p' fp/CMakeCache.txt)
[ "$found" = "$prefix/$CMAKEDIR" ] || fail "find_package found $found"
"$CMAKE_COMMAND" --build fp > fp-build.log || { cat fp-build.log; fail "build"; }
# CMake's build-tree RPATH points at the prefix's library.
# (ldd's output is read whole: with pipefail, `ldd | grep -q` fails at
# random when grep exits before ldd has written everything.)
fp_ldd=$(ldd fp/consumer)
grep -q "$libdir/libtransformer.so.$SOVERSION" <<< "$fp_ldd" \
  || { echo "$fp_ldd"; fail "fp/consumer does not load the installed library"; }
fp/consumer | tee fp-run.log
grep -q ': OK$' fp-run.log || fail "find_package consumer"

step "pkg-config consumer (tests/install/pkg_config)"
mkdir -p pc
make -C pc -f "$SOURCE_DIR/tests/install/pkg_config/Makefile" \
  SRCDIR="$SOURCE_DIR/tests/install/pkg_config/" CC="$CC"
LD_LIBRARY_PATH="$libdir" pc/consumer | tee pc-run.log
grep -q ': OK$' pc-run.log || fail "pkg-config consumer"

if [ -n "${PYTHON:-}" ]; then
  step "Python package in $PYTHON_DIR"
  [ -f "$prefix/$PYTHON_DIR/transformer/__init__.py" ] \
    || fail "no $PYTHON_DIR/transformer/__init__.py"
  where=$(env -u PYTHONHOME PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 \
          PYTHONPATH="$prefix/$PYTHON_DIR" "$PYTHON" -c \
          'import transformer, os; print(os.path.dirname(transformer.__file__))')
  echo "import transformer: $where"
  [ "$where" = "$prefix/$PYTHON_DIR/transformer" ] || fail "imported $where"
fi

if [ -n "${LUA:-}" ]; then
  step "Lua module in $LUA_CMOD_DIR and $LUA_LMOD_DIR"
  # The package transformer/ (init.lua and its files) beside transformer/core.so.
  where=$(LUA_PATH="$prefix/$LUA_LMOD_DIR/?.lua;$prefix/$LUA_LMOD_DIR/?/init.lua" \
          LUA_CPATH="$prefix/$LUA_CMOD_DIR/?.so" \
    "$LUA" -e 'local t = require("transformer")
               assert(type(t) == "table" and t.Model and t.optim)
               print(package.searchpath("transformer", package.path))') \
    || fail "require(\"transformer\") from the prefix"
  echo "require(\"transformer\"): $where"
  [ "$where" = "$prefix/$LUA_LMOD_DIR/transformer/init.lua" ] || fail "required $where"
fi

if [ "${CLI:-0}" = 1 ]; then
  step "transformer-generate and the model"
  model="$prefix/$DATADIR/transformer/kjv-char.safetensors"
  [ -f "$model" ] || fail "no $DATADIR/transformer/kjv-char.safetensors"
  # No LD_LIBRARY_PATH: the program finds the prefix's library through its
  # RUNPATH, $ORIGIN/<libdir relative to bindir> (cmake/TransformerInstall.cmake).
  cli="$prefix/$BINDIR/transformer-generate"
  runpath=$(LC_ALL=C readelf -d "$cli" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  echo "$BINDIR/transformer-generate: RUNPATH $runpath"
  [[ "$runpath" == '$ORIGIN'* ]] || fail "transformer-generate's RUNPATH is '$runpath'"
  loaded=$(env -u LD_LIBRARY_PATH ldd "$cli" \
           | sed -n "s/.*libtransformer\.so\.$SOVERSION => \([^ ]*\) .*/\1/p")
  echo "libtransformer.so.$SOVERSION => ${loaded/#$prefix/<prefix>}"
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/$real")" ] \
    || { env -u LD_LIBRARY_PATH ldd "$cli"; fail "transformer-generate does not load $LIBDIR/$real"; }
  env -u LD_LIBRARY_PATH "$cli" --help > cli-help.log \
    || { cat cli-help.log; fail "transformer-generate --help"; }
  env -u LD_LIBRARY_PATH "$cli" \
    --model "$model" --prompt "And God said" --max-tokens 20 | tee cli.log
  grep -q '^And God said' cli.log || fail "transformer-generate"
fi

echo
echo "install-check: OK"
