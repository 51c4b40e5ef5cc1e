#!/usr/bin/env bash
# Builds the Debian packages from a copy of this tree, checks them with
# lintian, installs them with apt, and uses them from the installed files
# only: pkg-config, a C program compiled against /usr/include/transformer and
# linked with -ltransformer, a find_package(transformer) program, the
# installed documentation (README, docs/, examples, manual pages, Python
# docstrings through pydoc), the dlopen example built with its Makefile
# from /usr/share/doc/libtransformer-dev/examples, `import transformer` in
# Debian's Python, require("transformer") in Lua 5.4, and
# transformer-generate with the installed default model.  Every check runs
# in an empty directory with a clean environment.
#
#   bash tools/package-check.sh
#
# Needs root (or sudo) for apt-get.  The packages are purged again at the
# end unless KEEP_PACKAGES=1; the .deb files and logs stay in the work
# directory ($PACKAGE_CHECK_DIR, default a new /tmp/transformer-packages.*)
# when the check fails or KEEP_WORK=1.  Also registered as the ctest test
# package_check with -DTRANSFORMER_PACKAGE_CHECK=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
start=$(date +%s)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

step() { echo; echo "== [$(( $(date +%s) - start ))s] $*"; }
fail() { echo "package-check: FAIL: $*" >&2; exit 1; }

work=${PACKAGE_CHECK_DIR:-$(mktemp -d /tmp/transformer-packages.XXXXXX)}
mkdir -p "$work"
packages=(libtransformer1 libtransformer-dev python3-transformer lua-transformer
          transformer-tools transformer-model-kjv)
installed=0
finish() {
  status=$?
  if [ "$installed" = 1 ] && [ "${KEEP_PACKAGES:-0}" != 1 ]; then
    $SUDO apt-get -o DPkg::Lock::Timeout=600 purge -y -qq "${packages[@]}" >/dev/null 2>&1 || true
  fi
  if [ "$status" -eq 0 ] && [ "${KEEP_WORK:-0}" != 1 ] && [ -z "${PACKAGE_CHECK_DIR:-}" ]; then
    rm -rf "$work"
  else
    echo "package-check: files kept in $work"
  fi
}
trap finish EXIT

step "build dependencies"
bash tools/install-deps.sh
dpkg-checkbuilddeps debian/control

# ---- Build ---------------------------------------------------------------
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
header_version=$(sed -n 's/^#define TFM_VERSION_STRING "\(.*\)"/\1/p' include/transformer/version.h)
[ "${version%%-*}" = "$header_version" ] \
  || fail "debian/changelog says $version, version.h says $header_version"

step "copy the tree (tracked and untracked, not ignored) to $work/libtransformer-$version"
tree="$work/libtransformer-$version"
rm -rf "$tree"
mkdir -p "$tree"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf - | tar -xf - -C "$tree"
else
  tar --exclude='./build*' --exclude=./debian/build -cf - . | tar -xf - -C "$tree"
fi

step "dpkg-buildpackage -us -uc -b"
(cd "$tree" && dpkg-buildpackage -us -uc -b) > "$work/build.log" 2>&1 \
  || { tail -60 "$work/build.log"; fail "dpkg-buildpackage (log: $work/build.log)"; }
grep -E '^dpkg-gensymbols: warning' "$work/build.log" || true
ls -l "$work"/*.deb

step "lintian"
changes=$(ls "$work"/libtransformer_"${version}"_*.changes)
lintian_status=0
lintian --fail-on error --info --display-info "$changes" > "$work/lintian.log" 2>&1 \
  || lintian_status=$?
cat "$work/lintian.log"
echo "lintian: $(grep -c '^E:' "$work/lintian.log" || true) errors," \
     "$(grep -c '^W:' "$work/lintian.log" || true) warnings," \
     "$(grep -c '^I:' "$work/lintian.log" || true) notes"
[ "$lintian_status" -eq 0 ] || fail "lintian reports errors"

# ---- Install ---------------------------------------------------------------
step "apt-get install ./*.deb"
installed=1
(cd "$work" && $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
   ./libtransformer1_*.deb ./libtransformer-dev_*.deb \
   ./python3-transformer_*.deb ./lua-transformer_*.deb \
   ./transformer-tools_*.deb ./transformer-model-kjv_*.deb) > "$work/apt.log" 2>&1 \
  || { cat "$work/apt.log"; fail "apt-get install"; }
dpkg-query -W "${packages[@]}"

# ---- Use, from the installed files only ---------------------------------------
# A fresh empty directory, an empty environment: nothing from the build tree
# or the caller's PATH (whose first python3 may not be Debian's).
use=$(mktemp -d "$work/use.XXXXXX")
mkdir -p "$use/home"
cp tests/install/pkg_config/main.c "$use/layer_norm.c"
cp -r tests/install/find_package "$use/find_package"
run() {
  (cd "$use" && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$use/home" \
     LANG=C.UTF-8 OPENBLAS_NUM_THREADS=1 "$@")
}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir="/usr/lib/$multiarch"

step "pkg-config --libs transformer"
libs=$(run pkg-config --libs transformer)
echo "$libs"
[ "$(echo $libs)" = "-ltransformer" ] || fail "pkg-config --libs gives '$libs'"
run pkg-config --modversion transformer

step "a C program compiled against the installed headers, linked with -ltransformer"
run cc -Wall -Wextra -o layer_norm layer_norm.c -ltransformer -lm
loaded=$(run ldd ./layer_norm | sed -n 's/.*libtransformer\.so\.1 => \([^ ]*\) .*/\1/p')
echo "libtransformer.so.1 => $loaded"
[ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libtransformer.so.1")" ] \
  || fail "layer_norm does not load $libdir/libtransformer.so.1"
run ./layer_norm | grep ': OK$' || fail "the C program"

step "the same through pkg-config --cflags --libs"
run sh -c 'cc -o layer_norm_pc layer_norm.c $(pkg-config --cflags --libs transformer) -lm && ./layer_norm_pc' \
  | grep ': OK$' || fail "the pkg-config build"

step "find_package(transformer) from $libdir/cmake/transformer"
run cmake -S find_package -B find_package/build > "$work/find_package.log" \
  || { cat "$work/find_package.log"; fail "cmake configure"; }
grep "transformer " "$work/find_package.log"
run cmake --build find_package/build > /dev/null || fail "cmake build"
run find_package/build/consumer | grep ': OK$' || fail "the find_package program"

step "the documentation in /usr/share/doc, manual pages"
dpkg -L libtransformer-dev lua-transformer python3-transformer transformer-tools \
     transformer-model-kjv | grep -E '^/usr/share/(doc|man)/' | sort \
  | while IFS= read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done
doc=/usr/share/doc/libtransformer-dev
has() { [ -f "$1" ] || [ -f "$1.gz" ] || fail "not installed: $1"; }
has "$doc/README.md"
for f in docs/*.md; do has "$doc/$f"; done
for f in dlopen_mha.c Makefile; do
  [ -f "$doc/examples/$f" ] || fail "not installed uncompressed: $doc/examples/$f"
done
has /usr/share/doc/lua-transformer/README.md
for f in examples/lua/*.lua; do
  [ -f "/usr/share/doc/lua-transformer/examples/$(basename "$f")" ] || fail "Lua example $f"
done
[ -f /usr/share/doc/python3-transformer/examples/attention_tour.ipynb ] || fail "the notebook"
has /usr/share/doc/transformer-model-kjv/README.md
# Every installed program has its manual page.
for prog in $(dpkg -L "${packages[@]}" | grep '^/usr/s\?bin/.'); do
  name=$(basename "$prog")
  dpkg -L "${packages[@]}" | grep -q "^/usr/share/man/man[18]/$name\.[18]\.gz$" \
    || fail "$prog has no manual page"
  echo "$prog: $(dpkg -L "${packages[@]}" | grep "/man[18]/$name\.")"
done
zcat /usr/share/man/man1/transformer-generate.1.gz | head -1 | grep -q "libtransformer ${version%%-*}\"" \
  || fail "the manual page does not name version ${version%%-*}"

step "build the dlopen example from $doc/examples with its Makefile (pkg-config)"
run cp -r "$doc/examples" doc-example
run make -C doc-example
run ./doc-example/dlopen_mha | tail -2
run ./doc-example/dlopen_mha | grep -q '^OK$' || fail "the dlopen program"

step "build the training example from $doc/examples/train with its Makefile (pkg-config --libs)"
[ -f "$doc/examples/train/train_tiny.c" ] || fail "not installed: $doc/examples/train/train_tiny.c"
run cp -r "$doc/examples/train" train-example
run make -C train-example
run ./train-example/train_tiny > "$work/train.out" || { cat "$work/train.out"; fail "the training example"; }
tail -2 "$work/train.out"

step "/usr/bin/python3 -c 'import transformer'"
where=$(run /usr/bin/python3 -c 'import transformer, os; print(os.path.dirname(transformer.__file__))')
echo "$where"
[ "$where" = /usr/lib/python3/dist-packages/transformer ] || fail "imported from $where"

step "help() shows the Python docstrings of the installed package"
run /usr/bin/python3 -m pydoc transformer.MultiheadAttention > "$work/pydoc.txt"
head -5 "$work/pydoc.txt"
grep -q "torch.nn.MultiheadAttention" "$work/pydoc.txt" || fail "pydoc transformer.MultiheadAttention"
run /usr/bin/python3 -c '
import inspect, transformer
missing = [n for n in transformer.__all__
           if (inspect.isclass(getattr(transformer, n))
               or inspect.isfunction(getattr(transformer, n)))
           and not (getattr(transformer, n).__doc__ or "").strip()]
assert not missing, missing
print(len(transformer.__all__), "public names, every class and function documented")' \
  || fail "Python docstrings"

step "lua5.4 -e 'require(\"transformer\")'"
lua_where=$(run lua5.4 -e 'local t = require("transformer")
               assert(type(t) == "table")
               print(package.searchpath("transformer", package.path))') \
  || fail "require(\"transformer\")"
echo "transformer from $lua_where"
[ "$lua_where" = /usr/share/lua/5.4/transformer/init.lua ] \
  || fail "require(\"transformer\") found $lua_where, not the package's transformer/init.lua"

step "the bindings find the installed default model"
model=$(dpkg -L transformer-model-kjv | grep '\.safetensors$')
py_model=$(run /usr/bin/python3 -c 'import transformer; print(transformer.default_model_path())')
lua_model=$(run lua5.4 -e 'print((require("transformer").default_model_path()))')
echo "package: $model"
echo "Python:  $py_model"
echo "Lua:     $lua_model"
[ "$py_model" = "$model" ] || fail "Python's default model is not the installed one"
[ "$lua_model" = "$model" ] || fail "Lua's default model is not the installed one"

step "transformer-train: a few steps on an installed example source, then transformer-generate on its model"
run transformer-train --text "$doc/examples/dlopen_mha.c" \
    --out "$work/tiny.safetensors" --steps 5 --layers 1 --d-model 16 \
    --heads 2 --d-ff 32 --context 16 --batch-size 4 --warmup 1 \
    --eval-windows 4 > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "transformer-train"; }
tail -1 "$work/train.log"
run transformer-generate --model "$work/tiny.safetensors" --max-tokens 5 --prompt "the" > /dev/null 2>&1 \
  || fail "transformer-generate on transformer-train's model"

step "transformer-generate --max-tokens 20 (default model)"
out=$(run transformer-generate --max-tokens 20 2> "$work/generate.err") \
  || { cat "$work/generate.err"; fail "transformer-generate"; }
echo "$out"
[ ${#out} -ge 20 ] || fail "transformer-generate printed '$out'"
grep -q "^In the beginning" <<< "$out" || fail "transformer-generate printed '$out'"

step "done in $(( $(date +%s) - start ))s"
echo "package-check: OK"
