#!/usr/bin/env bash
# transformer-generate --batch-file: each output line equals the single-
# prompt run of its line (prompt and text, newlines written as \n and
# backslashes as \\), greedy and sampled; an empty line is refused.
#   test_batch_file.sh TRANSFORMER_GENERATE
set -euo pipefail
gen="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '%s\n' "And God said" "I" "In the beginning God created the heaven" \
  "Blessed are" > "$dir/prompts"
for args in "--max-tokens 150" "--max-tokens 120 --temperature 0.9 --seed 7 --eos-token-id 10"; do
  # shellcheck disable=SC2086
  "$gen" --batch-file "$dir/prompts" $args > "$dir/batch" 2> "$dir/err"
  [ "$(wc -l < "$dir/batch")" -eq 4 ] || { echo "expected 4 lines"; exit 1; }
  i=0
  while IFS= read -r prompt; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    s=$("$gen" --prompt "$prompt" $args 2>/dev/null; echo x)
    s=${s%x}
    s=${s%$'\n'}
    s=${s//\\/\\\\}
    s=${s//$'\n'/\\n}
    line=$(sed -n "${i}p" "$dir/batch")
    if [ "$line" != "$s" ]; then
      echo "line $i differs ($args):"; echo " batch:  $line"; echo " single: $s"
      exit 1
    fi
  done < "$dir/prompts"
done
grep -q "^batch: 4 prompts" "$dir/err" || { echo "no batch report"; exit 1; }
printf 'a\n\nb\n' > "$dir/empty"
if "$gen" --batch-file "$dir/empty" > /dev/null 2> "$dir/err"; then
  echo "an empty line was accepted"; exit 1
fi
grep -q "line 2 is empty" "$dir/err"
echo "ok: batch file"
