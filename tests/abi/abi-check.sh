#!/usr/bin/env bash
# The ABI check of docs/ABI.md: writes the public ABI of a built
# libtransformer.so.1 with abidw (Debian: abigail-tools), reading only what
# the public headers declare, and compares it with the committed baseline
# with abidiff.
#
#   abi-check.sh LIBRARY HEADERS_DIR BASELINE SUPPRESSIONS WORK_DIR
#   abi-check.sh --update LIBRARY HEADERS_DIR BASELINE SUPPRESSIONS WORK_DIR
#
# Exit status: 0 when the ABI is the baseline's or only grew (new functions,
# new enumerators: reported, the test passes); 1 on an incompatible change
# (a function removed, a signature or a public struct or enum changed); 2 on
# a broken setup (no debug information, abidw failed); 77 when abidw or
# abidiff is not installed (ctest reports the test as skipped).
#
# --update writes the current ABI to BASELINE instead (tools/abi-update.sh
# does this on purpose, see docs/ABI.md).
set -euo pipefail

update=0
if [ "${1:-}" = "--update" ]; then
  update=1
  shift
fi
if [ $# -ne 5 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
library=$1 headers=$2 baseline=$3 suppressions=$4 work=$5
ABIDW=${ABIDW:-abidw}
ABIDIFF=${ABIDIFF:-abidiff}

for tool in "$ABIDW" "$ABIDIFF"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "abi-check: $tool not found (Debian: apt-get install abigail-tools);" \
         "the ABI was not checked" >&2
    exit 77
  fi
done
if [ ! -f "$library" ]; then
  echo "abi-check: no library at $library" >&2
  exit 2
fi

mkdir -p "$work"
current="$work/current.abi"

# abidw reads the types from DWARF: without it only symbol names would be
# compared, and a changed signature or struct layout would go unnoticed.
if ! LC_ALL=C readelf -S --wide "$library" | grep -q '\.debug_info'; then
  echo "abi-check: $library has no DWARF (.debug_info); it must be built" \
       "with -g (src/CMakeLists.txt adds it for every build type)" >&2
  exit 2
fi

# --exported-interfaces-only: describe what the ELF symbol table exports
#   (libabigail 2.2 otherwise loses some definitions to declarations seen
#   in other translation units).
# --headers-dir: keep only types declared in the public headers.
# --no-show-locs, --no-corpus-path, --no-comp-dir-path, --no-elf-needed,
# --no-architecture, --type-id-style hash: nothing in the baseline depends
#   on where, with which linker flags or on which 64-bit machine the
#   library was built, and adding a type does not renumber the others.
"$ABIDW" --exported-interfaces-only \
  --headers-dir "$headers" \
  --suppressions "$suppressions" \
  --drop-private-types \
  --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed \
  --no-architecture --type-id-style hash \
  --out-file "$current" "$library" \
  || { echo "abi-check: abidw failed on $library" >&2; exit 2; }

# Every exported public function must come with its declaration from the
# DWARF; a bare symbol would be checked by name only.
symbols=$(grep -o "<elf-symbol name='[^']*' version='TRANSFORMER_[0-9][^']*'[^>]*type='func-type'" "$current" \
          | sed "s/<elf-symbol name='\([^']*\)'.*/\1/" | sort -u)
declared=$(grep -o "<function-decl name='[^']*'[^>]*elf-symbol-id='[^']*'" "$current" \
           | sed "s/<function-decl name='\([^']*\)'.*/\1/" | sort -u)
undescribed=$(comm -23 <(printf '%s\n' "$symbols") <(printf '%s\n' "$declared"))
if [ -n "$undescribed" ]; then
  echo "abi-check: exported functions without a declaration in the debug" \
       "information (inlined away, folded, or no -g?):" >&2
  printf '  %s\n' $undescribed >&2
  exit 2
fi
n_functions=$(printf '%s\n' "$symbols" | grep -c .)

if [ "$update" -eq 1 ]; then
  cp "$current" "$baseline"
  echo "abi-check: wrote $baseline ($n_functions public functions)"
  exit 0
fi

if [ ! -f "$baseline" ]; then
  echo "abi-check: no baseline at $baseline (write one with tools/abi-update.sh)" >&2
  exit 2
fi

# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 the ABIs
# differ, 8 incompatible change.  Bit 8 is set for removed symbols only; a
# changed signature, struct layout or enumerator value sets just bit 4.  So
# compare twice: once without the added symbols, where any difference left
# is a change to something that existed (incompatible), then in full to
# report additions.
status=0
"$ABIDIFF" --suppressions "$suppressions" --no-added-syms \
  "$baseline" "$current" > "$work/changes.txt" 2>&1 || status=$?
if [ $((status & 3)) -ne 0 ]; then
  cat "$work/changes.txt" >&2
  echo "abi-check: abidiff failed (exit status $status)" >&2
  exit 2
fi
if [ "$status" -ne 0 ]; then
  cat "$work/changes.txt"
  echo
  echo "abi-check: INCOMPATIBLE ABI CHANGE against $baseline (abidiff exit" \
       "status $status): a program built against the baseline could break."
  echo "  Restore what changed (add a _v2 function instead: docs/ABI.md), or,"
  echo "  for a deliberate break, raise TFM_VERSION_MAJOR and run tools/abi-update.sh."
  exit 1
fi

# The report: without the suppressions, so that appended enumerators (and
# the _COUNT sentinels they moved) are listed too.  Test hooks are not in
# either file: abidw dropped them.
status=0
"$ABIDIFF" "$baseline" "$current" > "$work/additions.txt" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  cat "$work/additions.txt"
  echo
  echo "abi-check: compatible: the ABI grew since the baseline (new functions" \
       "or appended enumerators, listed above)."
  echo "  Update the baseline on purpose with tools/abi-update.sh when the" \
       "additions are final (docs/ABI.md)."
else
  echo "abi-check: the public ABI ($n_functions functions) is the baseline's."
fi
exit 0
