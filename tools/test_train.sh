#!/usr/bin/env bash
# transformer-train's checkpoints (ctest cli_train_*):
#   resume   (with --dropout 0.1) 20 steps in one go equal 10 steps, the end of the run, --resume
#            and 10 more, bit for bit (weights and optimizer state), and
#            equal a run killed (SIGKILL) at random moments and resumed
#            until it finishes; the final model generates with
#            transformer-generate;
#   errors   plain-word errors with a non-zero exit: missing file, text
#            that is not UTF-8 (overlong forms and surrogates too), characters
#            outside the checkpoint's vocabulary, a recipe option given with
#            --resume, a context the text cannot fill, a loss that is not
#            finite (the last checkpoint stays readable);
#   files    (issue 44, kind 3) only files the tool recorded as its own are
#            removed: a file whose name merely looks like a step file's or a
#            temporary file stays; a new run over an existing checkpoint (or
#            a directory that is not empty) is refused without --resume or
#            --overwrite, and --overwrite removes the old run's step files
#            once its own first checkpoint is in place; an output that
#            aliases the training text (same path, symbolic or hard link),
#            another output or a step file (a hard link to it) is refused,
#            the text left as it was; a
#            --log-file or --out that is not a regular file (a FIFO, a
#            directory) is refused at once, and a refused start leaves no
#            checkpoint directory behind;
#   state    (kinds 8, 9) a resume into a model other than the recipe's (a
#            deeper one), an optimizer file of another model (more
#            tensors), a negative exp_avg_sq, an lr in hexadecimal or with
#            a blank: refused, the checkpoint left as it was;
#   torch    the PyTorch reference trainer (tools/train_charlm.py), from the
#            same initial weights (the run's init.safetensors) and the same
#            batches (--sampler splitmix), gives the same loss at each of 50
#            steps within 1e-4 relative, and the same final bits per
#            character.
# Usage: test_train.sh resume|errors|files|state|torch TRAIN GENERATE TEXT
set -euo pipefail
what=$1 train=$2 generate=$3 text=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {   # expect PATTERN COMMAND...: exits non-zero saying PATTERN
  local pattern=$1; shift
  if "$@" > /dev/null 2> "$work/err"; then fail "exit 0: $*"; fi
  grep -q -- "$pattern" "$work/err" || { cat "$work/err"; fail "no '$pattern'"; }
}
# edit_safetensors FILE lr VALUE | FILE negate SUFFIX: rewrites a
# safetensors file (metadata "lr" set to VALUE, or the first value of the
# first tensor whose name ends in SUFFIX made -1), as a hand edit would.
edit_safetensors() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
path, what, arg = sys.argv[1:4]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
if what == "lr":
    head["__metadata__"]["lr"] = arg
else:
    name = sorted(k for k in head if k.endswith(arg))[0]
    begin = head[name]["data_offsets"][0]
    data[begin:begin + 4] = struct.pack("<f", -1.0)
text = json.dumps(head).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
PY
}

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
  # a NUL in the text: refused where it is, not taken for the end of the
  # vocabulary ("is empty")
  printf 'abc\nd\0ef' > "$work/nul.txt"
  expect "holds a NUL character (U+0000) at byte 5 (line 2)" \
    "$train" --text "$work/nul.txt" --out "$work/x"
  # nor an overlong U+0000 (C0 80, E0 80 80: it made the text "empty"), an
  # overlong 'a' (C1 A1), a surrogate (ED A0 80), a code point past
  # U+10FFFF (F4 90 80 80): each not UTF-8, at its byte (4)
  for bad in '\300\200' '\340\200\200' '\301\241' '\355\240\200' '\364\220\200\200'; do
    printf "abc\n$bad ef" > "$work/bad.txt"
    expect "bad.txt is not valid UTF-8 (byte 4)" \
      "$train" --text "$work/bad.txt" --out "$work/x"
  done
  # sizes from the command line: a documented limit, products checked
  # (no signed overflow: the sanitizer build runs this too)
  expect "batch-size 4611686018427387904 is over the limit of 2147483647" \
    "$train" --text "$text" --out "$work/x" --batch-size 4611686018427387904
  expect "overflow a 64-bit count" "$train" --text "$text" --out "$work/x" \
    --batch-size 2147483647 --context 2147483647 --grad-accum 2147483647
  expect "overflow a 64-bit count" "$train" --text "$text" --out "$work/x" \
    --steps 9223372036854775807 --grad-accum 2
  expect "too large" "$train" --text "$text" --out "$work/x" --seed 18446744073709551616
  expect "is not a whole number" "$train" --text "$text" --out "$work/x" --steps " 4"
  expect "is not a number" "$train" --text "$text" --out "$work/x" --lr 0x1p-3
  [ ! -e "$work/x" ] && [ ! -e "$work/x.ckpt" ] || fail "a refused run wrote files"
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
files)
  small+=(--steps 4 --checkpoint-interval 1)
  ck="$work/a.st.ckpt"
  "$train" --text "$text" --out "$work/a.st" "${small[@]}" --stop-after 3 \
    2> /dev/null || fail "first run"
  # files that are not the tool's, whatever their names
  for f in step-00000001.model.safetensors.bak step-notes.txt \
           x.safetensors.tmp.1 step-00000002.model.safetensors.tmp.99.0; do
    echo mine > "$ck/$f"
  done
  # a new run over it: refused, nothing touched
  cp "$ck/checkpoint.safetensors" "$work/pointer"
  expect "holds a checkpoint (step 3): continue it with --resume, or start over it with --overwrite" \
    "$train" --text "$text" --out "$work/a.st" "${small[@]}"
  cmp "$ck/checkpoint.safetensors" "$work/pointer" || fail "the pointer changed"
  [ -e "$ck/step-00000003.model.safetensors" ] || fail "step 3 removed by a refused run"
  expect "contradict" "$train" --text "$text" --out "$work/a.st" --resume --overwrite
  # resumed to the end: the old step files go, the others stay
  "$train" --text "$text" --out "$work/a.st" --resume 2> /dev/null || fail "resume"
  for f in step-00000001.model.safetensors.bak step-notes.txt \
           x.safetensors.tmp.1 step-00000002.model.safetensors.tmp.99.0; do
    [ "$(cat "$ck/$f")" = mine ] || fail "$f was removed or changed"
  done
  [ ! -e "$ck/step-00000003.model.safetensors" ] || fail "step 3 left"
  [ -e "$ck/step-00000004.optim.safetensors" ] || fail "no step 4"
  # --overwrite: a new run of 2 steps; the old step 4 goes after its first
  # checkpoint, the foreign files stay
  "$train" --text "$text" --out "$work/a.st" "${small[@]}" --steps 2 \
    --warmup 1 --overwrite 2> /dev/null || fail "--overwrite"
  [ ! -e "$ck/step-00000004.model.safetensors" ] || fail "old step 4 left"
  [ -e "$ck/step-00000002.model.safetensors" ] || fail "no new step 2"
  [ "$(cat "$ck/step-notes.txt")" = mine ] || fail "--overwrite removed a foreign file"
  # a directory that is not empty and holds no checkpoint
  mkdir "$work/full"; echo mine > "$work/full/notes"
  expect "is not empty and holds no checkpoint" "$train" --text "$text" \
    --out "$work/b.st" --checkpoint "$work/full" "${small[@]}"
  # outputs that alias the text: same path, symbolic link, hard link
  cp "$text" "$work/t.txt"; ln -s t.txt "$work/sym.txt"; ln "$work/t.txt" "$work/hard.txt"
  expect "are the same file: the run would overwrite its training text" \
    "$train" --text "$work/t.txt" --out "$work/t.txt" "${small[@]}"
  expect "are the same file: the run would overwrite its training text" \
    "$train" --text "$work/t.txt" --out "$work/sym.txt" "${small[@]}"
  expect "are the same file: the run would overwrite its training text" \
    "$train" --text "$work/sym.txt" --out "$work/hard.txt" "${small[@]}"
  expect "are the same file: the run would overwrite its training text" \
    "$train" --text "$work/t.txt" --out "$work/c.st" --log-file "$work/hard.txt" "${small[@]}"
  cp "$text" "$work/full/init.safetensors"
  expect "are the same file" "$train" --text "$work/full/init.safetensors" \
    --out "$work/c.st" --checkpoint "$work/full" --overwrite "${small[@]}"
  expect "one output would overwrite the other" "$train" --text "$work/t.txt" \
    --out "$work/c.st" --log-file "$work/c.st" "${small[@]}"
  expect "is among the checkpoint's step files" "$train" --text "$work/t.txt" \
    --out "$ck/step-00000002.model.safetensors" --checkpoint "$ck" --resume
  cmp "$work/t.txt" "$text" || fail "the training text changed"
  # a --log-file hard-linked to a step file the pointer names: refused (the
  # log was appended into the checkpoint's model file), the file unchanged
  ln "$ck/step-00000002.model.safetensors" "$work/hardlog.csv"
  cp "$ck/step-00000002.model.safetensors" "$work/step2.saved"
  expect "is the checkpoint's step file" "$train" --text "$text" \
    --out "$work/a.st" --resume --log-file "$work/hardlog.csv"
  cmp "$ck/step-00000002.model.safetensors" "$work/step2.saved" \
    || fail "the step file changed"
  # a --log-file that is not a regular file: refused at once (a FIFO no one
  # reads used to block forever), and a refused start leaves no checkpoint
  # directory behind (its init.safetensors made the next run "not empty")
  mkfifo "$work/fifo"; mkdir "$work/adir"
  timeout 20 "$train" --text "$work/t.txt" --out "$work/d.st" "${small[@]}" \
    --log-file "$work/fifo" > /dev/null 2> "$work/err" && fail "exit 0: log FIFO"
  grep -q "fifo: it is a FIFO (named pipe), not a regular file" "$work/err" \
    || { cat "$work/err"; fail "log FIFO not refused"; }
  expect "adir: it is a directory, not a regular file" "$train" \
    --text "$work/t.txt" --out "$work/d.st" --log-file "$work/adir" "${small[@]}"
  [ ! -e "$work/d.st.ckpt" ] || fail "a refused start left its checkpoint directory"
  # (under ASan a malloc too big for it must return NULL, as the C
  # library's does, instead of aborting: reliability.sh sets
  # allocator_may_return_null=0 for every other call)
  expect "out of memory for the batch" \
    env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" \
    "$train" --text "$work/t.txt" \
    --out "$work/d.st" "${small[@]}" --batch-size 2147483647
  [ ! -e "$work/d.st.ckpt" ] || fail "a refused start left its checkpoint directory"
  # --out that a rename cannot (or should not) replace: refused before the run
  expect "cannot write --out $work/adir: it is a directory" "$train" \
    --text "$work/t.txt" --out "$work/adir" "${small[@]}"
  expect "it is a FIFO (named pipe), not a regular file" "$train" \
    --text "$work/t.txt" --out "$work/fifo" "${small[@]}"
  [ -p "$work/fifo" ] || fail "--out replaced a FIFO"
  "$train" --text "$work/t.txt" --out "$work/d.st" "${small[@]}" \
    --log-file "$work/d.csv" 2> /dev/null || fail "run after refused starts"
  ;;
state)
  small+=(--steps 4 --stop-after 2)
  "$train" --text "$text" --out "$work/a.st" "${small[@]}" 2> /dev/null || fail "run a"
  "$train" --text "$text" --out "$work/b.st" "${small[@]}" --layers 3 2> /dev/null || fail "run b"
  a="$work/a.st.ckpt" b="$work/b.st.ckpt" s=step-00000002
  cp -r "$a" "$work/saved"
  resume_a() { "$train" --text "$text" --out "$work/a.st" --resume "$@"; }
  # a model deeper than the recipe
  cp "$b/$s.model.safetensors" "$a/$s.model.safetensors"
  expect "is not the model of the checkpoint's recipe: the number of layers (--layers) differs" resume_a
  cp "$work/saved/$s.model.safetensors" "$a/"
  # the optimizer state of another (deeper) model: more tensors
  cp "$b/$s.optim.safetensors" "$a/$s.optim.safetensors"
  expect "holds 120 tensors; this optimizer over 28 parameters keeps 84" resume_a
  # a negative second moment; an lr read leniently before
  cp "$work/saved/$s.optim.safetensors" "$a/"
  edit_safetensors "$a/$s.optim.safetensors" negate .exp_avg_sq
  expect "holds a negative value (-1 at index 0); second moments are never negative" resume_a
  for lr in 0x1p-3 " 0.001" "+0.001" inf; do
    cp "$work/saved/$s.optim.safetensors" "$a/"
    edit_safetensors "$a/$s.optim.safetensors" lr "$lr"
    expect "has no valid \"lr\"" resume_a
  done
  cmp "$a/checkpoint.safetensors" "$work/saved/checkpoint.safetensors" \
    || fail "a refused resume changed the pointer"
  # the file as written resumes
  cp "$work/saved/$s.optim.safetensors" "$a/"
  resume_a --stop-after 1 2> /dev/null || fail "resume of the untouched checkpoint"
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
