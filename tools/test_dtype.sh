#!/usr/bin/env bash
# transformer-generate --dtype and --save-model (weights.h): a model file
# written with --dtype q8_0 --save-model generates what --dtype q8_0
# generates on the original (greedy), loaded with --dtype auto (its stored
# types) and with the default; an unknown --dtype is refused; --help
# documents both.  (test_quantize.py compares --dtype with Python's
# quantize + generate.)
#   test_dtype.sh TRANSFORMER_GENERATE MODEL
set -euo pipefail
gen="$1"
model="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
help=$("$gen" --help)
grep -q -- "--dtype TYPE" <<< "$help" || { echo "--help lacks --dtype"; exit 1; }
grep -q -- "--save-model OUT" <<< "$help" || { echo "--help lacks --save-model"; exit 1; }
for dtype in q8_0 q4_0 bf16; do
  want=$("$gen" --model "$model" --dtype "$dtype" --prompt "And God" \
         --max-tokens 60 2>/dev/null)
  "$gen" --model "$model" --dtype "$dtype" --save-model "$dir/m.safetensors" \
    2> "$dir/err" > "$dir/out"
  [ ! -s "$dir/out" ] || { echo "--save-model generated text"; exit 1; }
  grep -q "wrote '$dir/m.safetensors'" "$dir/err" || { cat "$dir/err"; exit 1; }
  [ "$(stat -c %s "$dir/m.safetensors")" -lt "$(stat -c %s "$model")" ] \
    || { echo "$dtype: the saved file is not smaller"; exit 1; }
  for args in "--dtype auto" ""; do
    # shellcheck disable=SC2086
    got=$("$gen" --model "$dir/m.safetensors" $args --prompt "And God" \
          --max-tokens 60 2>/dev/null)
    if [ "$got" != "$want" ]; then
      echo "$dtype, saved, $args: differs"; echo " want: $want"; echo " got:  $got"
      exit 1
    fi
  done
done
if "$gen" --model "$model" --dtype int8 > /dev/null 2> "$dir/err"; then
  echo "--dtype int8 was accepted"; exit 1
fi
grep -q -- "--dtype: int8 is not auto, f32, bf16, f16, q8_0 or q4_0" "$dir/err" \
  || { cat "$dir/err"; exit 1; }
# d_model 128 is whole blocks; the float32 text stays the default's.
a=$("$gen" --model "$model" --max-tokens 30 2>/dev/null)
b=$("$gen" --model "$model" --dtype f32 --max-tokens 30 2>/dev/null)
[ "$a" = "$b" ] || { echo "--dtype f32 differs from the default"; exit 1; }
echo "ok: dtype"
