#!/usr/bin/env bash
# transformer-train's checkpoints (ctest cli_train_*):
#   resume   (with --dropout 0.1) 20 steps in one go equal 10 steps, the end of the run, --resume
#            and 10 more, bit for bit (weights and optimizer state), and
#            equal a run killed (SIGKILL) at random moments and resumed
#            until it finishes; the final model generates with
#            transformer-generate;
#   errors   plain-word errors with a non-zero exit: missing file, characters
#            outside the checkpoint's vocabulary, a recipe option given with
#            --resume, a context the text cannot fill, a loss that is not
#            finite (the last checkpoint stays readable);
#   torch    the PyTorch reference trainer (tools/train_charlm.py), from the
#            same initial weights (the run's init.safetensors) and the same
#            batches (--sampler splitmix), gives the same loss at each of 50
#            steps within 1e-4 relative, and the same final bits per
#            character.
# Usage: test_train.sh resume|errors|torch TRAIN GENERATE TEXT
set -euo pipefail
what=$1 train=$2 generate=$3 text=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

small=(--layers 2 --d-model 32 --heads 2 --d-ff 64 --context 32
       --batch-size 4 --warmup 3 --eval-windows 8 --eval-interval 0
       --threads 1 --log-interval 5)

same_checkpoint() {   # same_checkpoint DIR_A DIR_B STEP
  local s; s=$(printf '%08d' "$3")
  cmp "$1/step-$s.model.safetensors" "$2/step-$s.model.safetensors" \
    || fail "weights differ at step $3 ($1, $2)"
  cmp "$1/step-$s.optim.safetensors" "$2/step-$s.optim.safetensors" \
    || fail "optimizer state differs at step $3 ($1, $2)"
}

case $what in
resume)
  # with dropout: the masks of a resumed run are the uninterrupted run's
  small+=(--dropout 0.1)
  "$train" --text "$text" --out "$work/a.st" --steps 20 "${small[@]}" \
    2> "$work/a.log" || { cat "$work/a.log"; fail "uninterrupted run"; }
  grep -q "^step 20/20  loss" "$work/a.log" || fail "no progress line"
  grep -q "validation [0-9.]* bits per character" "$work/a.log" \
    || fail "no validation line"
  "$train" --text "$text" --out "$work/b.st" --steps 20 "${small[@]}" \
    --stop-after 10 2> "$work/b1.log" || fail "first half"
  [ ! -e "$work/b.st" ] || fail "a stopped run wrote the final model"
  "$train" --text "$text" --out "$work/b.st" --resume --threads 1 \
    2> "$work/b2.log" || { cat "$work/b2.log"; fail "resume"; }
  grep -q "steps 11 to 20 of 20" "$work/b2.log" || fail "resume did not start at step 11"
  same_checkpoint "$work/a.st.ckpt" "$work/b.st.ckpt" 20

  # Killed at random moments (checkpoint every step), resumed each time.
  "$train" --text "$text" --out "$work/a2.st" --steps 40 "${small[@]}" \
    --checkpoint-interval 1 --batch-size 16 2> /dev/null || fail "run of 40"
  kills=0 steps_done=""
  for round in $(seq 1 60); do
    args=(--text "$text" --out "$work/c.st" --threads 1)
    if [ -e "$work/c.st.ckpt/checkpoint.safetensors" ]; then
      args+=(--resume)
    else
      args+=(--steps 40 "${small[@]}" --checkpoint-interval 1 --batch-size 16)
      rm -rf "$work/c.st.ckpt"
    fi
    "$train" "${args[@]}" 2> "$work/c.log" &
    pid=$!
    sleep "$(printf "0.%03d" $((RANDOM % 500 + 100)))"
    if kill -9 "$pid" 2> /dev/null; then kills=$((kills + 1)); fi
    wait "$pid" 2> /dev/null || true
    steps_done+=" $(grep -ao "step-0*[0-9]*\.model" "$work/c.st.ckpt/checkpoint.safetensors" 2> /dev/null | head -1 | tr -dc 0-9 | sed "s/^0*//" || true)"
    [ -e "$work/c.st" ] && break
  done
  if [ ! -e "$work/c.st" ]; then
    "$train" --text "$text" --out "$work/c.st" --resume --threads 1 \
      2> "$work/c.log" || { cat "$work/c.log"; fail "last resume"; }
  fi
  echo "killed $kills times; checkpoint steps after each start:$steps_done"
  same_checkpoint "$work/a2.st.ckpt" "$work/c.st.ckpt" 40
  out=$("$generate" --model "$work/a.st" --max-tokens 8 --prompt "The" 2> /dev/null)
  [ "${out:0:3}" = "The" ] || fail "the trained model does not generate: '$out'"
  ;;
errors)
  expect() {   # expect PATTERN COMMAND...
    local pattern=$1; shift
    if "$@" > /dev/null 2> "$work/err"; then fail "exit 0: $*"; fi
    grep -q -- "$pattern" "$work/err" || { cat "$work/err"; fail "no '$pattern'"; }
  }
  expect "cannot read $work/none" "$train" --text "$work/none" --out "$work/x"
  expect "required" "$train" --out "$work/x"
  expect "unknown option" "$train" --text "$text" --out "$work/x" --no-such
  expect "is not one of" "$train" --text "$text" --out "$work/x" --positions abc
  expect "does not divide" "$train" --text "$text" --out "$work/x" --heads 3
  printf 'abcabc' > "$work/short.txt"
  expect "too short for --context" "$train" --text "$work/short.txt" --out "$work/x"
  expect "no readable checkpoint" "$train" --text "$text" --out "$work/x" --resume
  "$train" --text "$text" --out "$work/r.st" --steps 4 "${small[@]}" \
    --stop-after 2 2> /dev/null || fail "short run"
  expect "fixed by the checkpoint" "$train" --text "$text" --out "$work/r.st" --resume --lr 1
  printf 'abc\x01xyz%.0s' $(seq 1 100) > "$work/other.txt"
  expect "vocabulary lacks: character U+0001" "$train" --text "$work/other.txt" \
    --out "$work/r.st" --resume
  # A learning rate that overflows the weights: the loss stops being finite.
  "$train" --text "$text" --out "$work/n.st" --steps 30 "${small[@]}" \
    --warmup 0 --checkpoint-interval 1 --lr 1e30 --clip 0 2> "$work/err" \
    && fail "exit 0 with lr 1e30"
  grep -q "not finite\|NaN\|infinit" "$work/err" || { cat "$work/err"; fail "no NaN message"; }
  grep -q "last checkpoint is intact" "$work/err" || fail "no checkpoint note"
  "$train" --text "$text" --out "$work/n.st" --resume --stop-after 1 2> /dev/null \
    && fail "resuming into the same overflow succeeded"
  [ -e "$work/n.st.ckpt/checkpoint.safetensors" ] || true
  ;;
torch)
  here=$(cd "$(dirname "$0")" && pwd)
  tiny=(--steps 50 --warmup 0 --d-model 32 --n-heads 2 --n-layers 2 --d-ff 64
        --context-length 32 --batch-size 8 --eval-windows 8 --threads 1)
  "$train" --text "$text" --out "$work/x.st" --steps 50 "${small[@]}" \
    --batch-size 8 --warmup 0 --checkpoint-interval 0 \
    --log-file "$work/ours.csv" 2> "$work/ours.log" \
    || { cat "$work/ours.log"; fail "transformer-train"; }
  /usr/bin/python3 "$here/train_charlm.py" --text "$text" \
    --init "$work/x.st.ckpt/init.safetensors" --sampler splitmix "${tiny[@]}" \
    --log-file "$work/ref.csv" --out "$work/ref.st" > "$work/ref.log" 2>&1 \
    || { cat "$work/ref.log"; fail "train_charlm.py"; }
  [ "$(wc -l < "$work/ours.csv")" = 50 ] || fail "ours: not 50 steps"
  paste -d, "$work/ours.csv" "$work/ref.csv" | awk -F, '
    { if ($1 != $4) { print "step mismatch " $1 " " $4; bad = 1 }
      r = ($2 - $5) / $5; if (r < 0) r = -r; if (r > m) m = r
      l = ($3 - $6); if (l < 0) l = -l; if (l > 1e-9 * $6 + 1e-12) { print "lr differs at " $1; bad = 1 } }
    END { printf "max relative loss difference over %d steps: %.3g\n", NR, m
          if (NR != 50 || m > 1e-4 || bad) exit 1 }' || fail "loss curves differ"
  ours=$(grep -o "validation [0-9.]* bits" "$work/ours.log" | tail -1 | tr -dc 0-9.)
  ref=$(grep -o "val [0-9.]* bpc" "$work/ref.log" | tr -dc 0-9.)
  awk -v a="$ours" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-4) }' \
    || fail "final validation bpc: ours $ours, PyTorch $ref"
  ;;
*) fail "unknown test $what" ;;
esac
echo "ok: $what"
