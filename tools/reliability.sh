#!/usr/bin/env bash
# The reliability checks of docs/TESTING.md, from a fresh clone after
# tools/install-deps.sh (needs clang, libclang-rt-14-dev, valgrind):
#
#   1. build       regular build (build-rel) and its C test suite
#   2. valgrind    every C test program of build-rel under memcheck: no
#                  errors, no definite or indirect leaks
#   3. asan        the C test suite built with ASan + UBSan (build-asan)
#   4. tsan        the C test suite built with ThreadSanitizer (build-tsan)
#   5. fuzz        libFuzzer harnesses (build-fuzz): the regression inputs
#                  and seed corpus, then FUZZ_SECONDS of fuzzing each
#   6. bindings    the Lua and Python lifetime suites (objects used after
#                  their owners were closed or collected) under memcheck,
#                  with the bindings built (build-bind): no errors
#
#   bash tools/reliability.sh            every step
#   bash tools/reliability.sh fuzz tsan  only those steps
#
# Environment: FUZZ_SECONDS (default 120 per harness), JOBS (default nproc),
# CC_SANITIZE (compiler of the ASan build: clang, the default, or gcc;
# TSan always uses clang).
# Logs go to build-reliability/; the summary at the end gives each step's
# result and time.  Exits non-zero when any step fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-120}
CC_SANITIZE=${CC_SANITIZE:-clang}
LOGS=$ROOT/build-reliability
mkdir -p "$LOGS"

ALL_STEPS=(build valgrind asan tsan fuzz bindings)
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=("${ALL_STEPS[@]}")

# Tests that regenerate references with PyTorch (slow, Python, covered by
# the main CI run) or check the build itself rather than the code (ABI
# dump, install tree) are left out of the sanitizer and valgrind runs, and
# so is test_oom_valgrind (step 2 runs test_oom under valgrind anyway),
# and so is ggml_rival_smoke (the benchmark's rival, not our code; only
# registered in a build configured with -DTRANSFORMER_BENCH_RIVALS=ON).
EXCLUDE='^(fixtures_generate|fixtures_fresh|models_generate|models_generate_greedy|models_fresh|abi_check|install_consumers|test_oom_valgrind|ggml_rival_smoke)$'

SAN_COMMON="-fno-omit-frame-pointer -g -O1"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

results=()
failed=0

say() { printf '\n==== %s ====\n' "$*"; }

# run_step NAME FUNCTION: runs it, records pass/fail and seconds.
run_step() {
    local name=$1 fn=$2 start=$SECONDS rc
    say "$name"
    "$fn"
    rc=$?
    local took=$((SECONDS - start))
    if [ $rc -eq 0 ]; then
        results+=("$(printf '%-10s passed  %4d s' "$name" "$took")")
    else
        results+=("$(printf '%-10s FAILED  %4d s  (see %s)' "$name" "$took" "$LOGS")")
        failed=1
    fi
}

need() {
    local missing=0
    for tool in "$@"; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "missing: $tool (run tools/install-deps.sh)" >&2
            missing=1
        fi
    done
    return $missing
}

# configure_build DIR CC C_FLAGS [cmake args...]
configure_build() {
    local dir=$1 cc=$2 flags=$3
    shift 3
    # A build folder configured with another compiler is started afresh.
    if [ -f "$dir/CMakeCache.txt" ] &&
        ! grep -q "^CMAKE_C_COMPILER:[A-Z]*=$(command -v "$cc")\$" "$dir/CMakeCache.txt"; then
        rm -rf "$dir"
    fi
    CC=$cc cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTRANSFORMER_BUILD_PYTHON=OFF -DTRANSFORMER_BUILD_LUA=OFF \
        -DCMAKE_C_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" \
        -DCMAKE_SHARED_LINKER_FLAGS="$flags" "$@" >"$LOGS/$(basename "$dir")-configure.log" 2>&1 &&
        cmake --build "$dir" -j"$JOBS" >"$LOGS/$(basename "$dir")-build.log" 2>&1 ||
        { tail -n 40 "$LOGS/$(basename "$dir")-build.log" "$LOGS/$(basename "$dir")-configure.log"; return 1; }
}

# ---- 1. regular build and its C suite ------------------------------------
step_build() {
    configure_build build-rel "${CC:-cc}" "" || return 1
    (cd build-rel && ctest -j"$JOBS" -E "$EXCLUDE" --output-on-failure \
        >"$LOGS/build-ctest.log" 2>&1) ||
        { tail -n 60 "$LOGS/build-ctest.log"; return 1; }
    tail -n 3 "$LOGS/build-ctest.log"
}

# ---- 2. valgrind memcheck over every C test program ----------------------
# The test list (commands and arguments) comes from ctest; every test whose
# program is an executable of build-rel runs under memcheck, JOBS at a time.
# Errors and definite or indirect leaks fail (exit code 99); "possibly
# lost" blocks (thread stacks of the library's pool) are not leaks.
step_valgrind() {
    need valgrind || return 1
    [ -d build-rel ] || step_build || return 1
    local list=$LOGS/valgrind-tests.txt
    (cd build-rel && ctest --show-only=json-v1) | python3 -c '
import json, os, re, shlex, sys
exclude = re.compile(sys.argv[1])
for t in json.load(sys.stdin)["tests"]:
    cmd = t.get("command") or []
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if exclude.match(t["name"]) or not cmd:
        continue
    exe = cmd[0]
    if not exe.startswith(sys.argv[2]) or not os.access(exe, os.X_OK):
        continue
    with open(exe, "rb") as f:
        if f.read(4) != b"\x7fELF":
            continue
    # The test environment: ENVIRONMENT and the ENVIRONMENT_MODIFICATION
    # operations the suite uses (set, unset, path_list_prepend/append).
    env, sets = ["env"], []
    for kv in props.get("ENVIRONMENT", []):
        sets.append(kv)
    for mod in props.get("ENVIRONMENT_MODIFICATION", []):
        key, rest = mod.split("=", 1)
        op, _, value = rest.partition(":")
        old = os.environ.get(key, "")
        if op == "unset":
            env += ["-u", key]
        elif op in ("set", "reset"):
            sets.append(key + "=" + value)
        elif op == "path_list_prepend":
            sets.append(key + "=" + value + (":" + old if old else ""))
        elif op == "path_list_append":
            sets.append(key + "=" + (old + ":" if old else "") + value)
        else:
            sys.exit("unhandled ENVIRONMENT_MODIFICATION " + mod)
    will_fail = 1 if props.get("WILL_FAIL") in (True, "TRUE", "ON", "1") else 0
    print("\t".join([t["name"], str(will_fail), shlex.join(env + sets),
                     shlex.join(cmd)]))
' "$EXCLUDE" "$ROOT/build-rel/" >"$list" || return 1
    echo "$(wc -l <"$list") programs under memcheck, $JOBS at a time"
    mkdir -p "$LOGS/valgrind"
    # CMocka cases too slow for memcheck are skipped through
    # cmocka_set_skip_filter, set from $TFM_CMOCKA_SKIP by a preloaded
    # constructor (the test sources stay as they are):
    #   test_model: shipped_model_greedy (the 3 MB shipped model, 200 greedy
    #   steps; tens of minutes under memcheck, covered by the ASan run).
    printf '%s\n' '#include <stdlib.h>' \
        'void cmocka_set_skip_filter(const char *pattern);' \
        '__attribute__((constructor)) static void skip(void)' \
        '{ const char *p = getenv("TFM_CMOCKA_SKIP"); if (p && *p) cmocka_set_skip_filter(p); }' \
        >"$LOGS/cmocka_skip.c"
    cc -shared -fPIC -o "$LOGS/cmocka_skip.so" "$LOGS/cmocka_skip.c" -lcmocka || return 1
    local rc=0
    # shellcheck disable=SC2016
    tr '\n' '\0' <"$list" | xargs -0 -P "$JOBS" -I{} bash -c '
        IFS=$'"'"'\t'"'"' read -r name will_fail envp cmd <<<"$1"
        log=$2/valgrind/$name.log
        start=$SECONDS
        skip=
        rounds=
        case $name in
        test_model) skip="shipped_*" ;;
        # A prompt longer than the context, greedy and sampled through
        # every door: thousands of short decoding steps, each a pool job
        # that memcheck runs one thread at a time (over 30 minutes); the
        # asan and tsan steps and the plain suite run them.
        test_generate) skip="long_prompt_is_its_tail" ;;
        test_generate_batch) skip="long_prompts" ;;
        test_beam_search) skip="test_long_prompt_is_its_tail" ;;
        test_threads | test_thread_count) rounds=3 ;; # memcheck: one thread at a time
        esac
        eval "$envp TFM_CMOCKA_SKIP=\$skip TFM_THREADS_ROUNDS=\$rounds" \
            "LD_PRELOAD=\$2/cmocka_skip.so" \
            valgrind --tool=memcheck --leak-check=full \
            --show-leak-kinds=definite,indirect \
            --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
            "--suppressions=\$3/tests/valgrind.supp" --num-callers=30 \
            "$cmd" >"$log" 2>&1
        rc=$?
        if [ $rc -eq 99 ] || { [ $rc -ne 0 ] && [ "$will_fail" = 0 ]; }; then
            echo "FAIL $name (exit $rc, $((SECONDS - start)) s): $log"
            tail -n 30 "$log"
            exit 1
        fi
        summary=$(grep -m1 "ERROR SUMMARY" "$log" | sed "s/^==[0-9]*== //")
        echo "ok   $name ($((SECONDS - start)) s) $summary"
    ' _ {} "$LOGS" "$ROOT" || rc=1
    return $rc
}

# ---- 3. AddressSanitizer + UndefinedBehaviorSanitizer ----------------------
# clang by default: its UBSan also reports offsets applied to NULL (GCC's
# does not).  clang links the sanitizer runtimes into executables only, so
# the library is linked with -z undefs (overriding its --no-undefined) and
# takes them from the test program.  With gcc (CC_SANITIZE=gcc) the
# library's AVX2 target_clones are built and checked too.
step_asan() {
    need "$CC_SANITIZE" || return 1
    local undefs=
    case $CC_SANITIZE in *clang*) undefs="-Wl,-z,undefs" ;; esac
    configure_build build-asan "$CC_SANITIZE" \
        "-fsanitize=address,undefined -fno-sanitize-recover=all $SAN_COMMON" \
        -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined $undefs" ||
        return 1
    (cd build-asan && ctest -j"$JOBS" -E "$EXCLUDE" --output-on-failure \
        >"$LOGS/asan-ctest.log" 2>&1) ||
        { grep -B2 -A40 -E "ERROR: (Address|Leak)Sanitizer|runtime error" \
              "$LOGS/asan-ctest.log" | head -n 120
          tail -n 30 "$LOGS/asan-ctest.log"; return 1; }
    tail -n 3 "$LOGS/asan-ctest.log"
}

# ---- 4. ThreadSanitizer ----------------------------------------------------
# The library and the tests are instrumented (clang: GCC instruments the
# resolvers of the library's target_clones functions, which then crash at
# load time, before the TSan runtime is up).  The library is linked without
# the runtime (-z undefs overrides its --no-undefined): the test programs
# carry it statically and export it.  OpenBLAS is not instrumented; it runs
# single-threaded inside the library's own pool (tfm_set_num_threads), and
# OPENBLAS_NUM_THREADS=1 keeps it from starting threads of its own at load.
# Every C suite runs, the thread test first: each exercises the pool.
step_tsan() {
    need clang || return 1
    # test_fork's children start threads after a multi-threaded fork,
    # which TSan does not support (it kills the child); it runs in the
    # regular, ASan and valgrind runs.
    local TSAN_EXCLUDE="${EXCLUDE%)\$}|test_fork)\$"
    CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTRANSFORMER_BUILD_PYTHON=OFF -DTRANSFORMER_BUILD_LUA=OFF \
        -DTRANSFORMER_BUILD_TOOLS=OFF \
        -DCMAKE_C_FLAGS="-fsanitize=thread $SAN_COMMON" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
        -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread -Wl,-z,undefs" \
        >"$LOGS/build-tsan-configure.log" 2>&1 &&
        cmake --build build-tsan -j"$JOBS" >"$LOGS/build-tsan-build.log" 2>&1 ||
        { tail -n 40 "$LOGS/build-tsan-build.log"; return 1; }
    (cd build-tsan &&
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp" \
        OPENBLAS_NUM_THREADS=1 ctest -j"$JOBS" -E "$TSAN_EXCLUDE" \
        --output-on-failure >"$LOGS/tsan-ctest.log" 2>&1) ||
        { grep -A60 "WARNING: ThreadSanitizer" "$LOGS/tsan-ctest.log" | head -n 120
          tail -n 30 "$LOGS/tsan-ctest.log"; return 1; }
    tail -n 3 "$LOGS/tsan-ctest.log"
}

# One harness: replay tests/regressions/<h> and the seed corpus, then
# fuzz FUZZ_SECONDS (new inputs go to build-fuzz/corpus-<h>, kept
# between local runs).  Prints one line; non-zero on any finding.
fuzz_one() {
    local h=$1 exe work dict status runs cov
    exe=build-fuzz/fuzz_$h
    work=build-fuzz/corpus-$h
    mkdir -p "$work"
    "$exe" -runs=0 -artifact_prefix=build-fuzz/artifacts/$h-replay- \
        tests/regressions/$h tests/fuzz/corpus/$h \
        >"$LOGS/fuzz-$h-replay.log" 2>&1 ||
        { echo "FAIL $h: replaying tests/regressions/$h"
          tail -n 40 "$LOGS/fuzz-$h-replay.log"; return 1; }
    dict=tests/fuzz/$h.dict
    [ -f "$dict" ] || dict=tests/fuzz/safetensors.dict
    "$exe" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
        -dict="$dict" -print_final_stats=1 \
        -artifact_prefix=build-fuzz/artifacts/$h- \
        "$work" tests/fuzz/corpus/$h >"$LOGS/fuzz-$h.log" 2>&1
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOGS/fuzz-$h.log")
    cov=$(grep -E "^#[0-9]+.*cov:" "$LOGS/fuzz-$h.log" | tail -n 1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)\/.*/cov \1, ft \2, corpus \3/')
    if [ $status -ne 0 ] || ls build-fuzz/artifacts/$h-* >/dev/null 2>&1; then
        echo "FAIL $h (exit $status): $LOGS/fuzz-$h.log"
        grep -A40 -E "ERROR: |runtime error|broken promise|==ERROR" "$LOGS/fuzz-$h.log" | head -n 80
        ls build-fuzz/artifacts/
        echo "Reproduce: $exe <artifact>; then copy the input to tests/regressions/$h/"
        return 1
    fi
    echo "ok   $h: ${runs:-?} executions in $FUZZ_SECONDS s ($cov)"
}

# ---- 5. libFuzzer ------------------------------------------------------------
step_fuzz() {
    need clang || return 1
    (CC=clang cmake -S tests/fuzz -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        >"$LOGS/fuzz-configure.log" 2>&1 &&
        cmake --build build-fuzz -j"$JOBS" >"$LOGS/fuzz-build.log" 2>&1) ||
        { tail -n 40 "$LOGS/fuzz-build.log" "$LOGS/fuzz-configure.log"; return 1; }
    local rc=0 pids=() h wave
    rm -rf build-fuzz/artifacts
    mkdir -p build-fuzz/artifacts
    # Two waves, each harness of a wave in parallel: the readers of the
    # library's files, then the readers of directories and of the CLIs'
    # files (issue 44).  Twelve at once on CI's 2 cores would give each a
    # fifth of a core.
    for wave in "safetensors model_load tokenizer_files tokenizer model_metadata gguf" \
                "hub marian image optimizer generation_config checkpoint_pointer batch_file"; do
        pids=()
        for h in $wave; do
            fuzz_one "$h" &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || rc=1; done
    done
    return $rc
}

# ---- 6. the bindings' lifetime suites under memcheck ----------------------
# The other builds leave the bindings out (their interpreters are not
# instrumented); here the Lua and Python modules over a RelWithDebInfo
# library run their lifetime suites (bindings/lua/tests/test_lifetime.lua,
# bindings/python/tests/test_lifetime_owners.py: every object that refers
# to another, used after its owner was closed or collected) under memcheck,
# where a read of freed memory is an error.  Lua closes its state at the
# end (finalizers run), so its definite and indirect leaks count too;
# Python's own allocations at exit are not checked for leaks.
step_bindings() {
    need valgrind lua5.4 || return 1
    local dir=build-bind lua_src=$ROOT/bindings/lua
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTRANSFORMER_PYTHON=/usr/bin/python3 >"$LOGS/build-bind-configure.log" 2>&1 &&
        cmake --build "$dir" -j"$JOBS" --target transformer_lua transformer_python \
            >"$LOGS/build-bind-build.log" 2>&1 ||
        { tail -n 40 "$LOGS/build-bind-build.log" "$LOGS/build-bind-configure.log"; return 1; }
    local rc=0
    # test_weights.lua: the load options' typemap (bindings/lua/weights.i)
    # and models holding stored weights, closed and collected.
    local lua_test
    for lua_test in test_lifetime.lua test_weights.lua; do
        (cd "$lua_src/tests" &&
            LUA_PATH="$lua_src/?.lua;$lua_src/?/init.lua;$lua_src/tests/?.lua;;" \
            LUA_CPATH="$ROOT/$dir/bindings/lua/?.so;;" TFM_SOURCE_DIR=$ROOT \
            TRANSFORMER_MODEL= valgrind --tool=memcheck --leak-check=full \
            --show-leak-kinds=definite,indirect \
            --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
            --num-callers=30 "--suppressions=$ROOT/tests/valgrind.supp" \
            lua5.4 "$lua_test" >"$LOGS/bind-$lua_test.log" 2>&1) ||
            { echo "FAIL $lua_test: $LOGS/bind-$lua_test.log"; tail -n 40 "$LOGS/bind-$lua_test.log"; rc=1; }
    done
    (cd "$ROOT/bindings/python/tests" &&
        PYTHONPATH=$ROOT/$dir/bindings/python PYTHONMALLOC=malloc \
        TRANSFORMER_MODEL= OPENBLAS_NUM_THREADS=1 valgrind --tool=memcheck \
        --error-exitcode=99 --num-callers=30 \
        "--suppressions=$ROOT/tests/valgrind.supp" /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider --noconftest test_lifetime_owners.py \
        >"$LOGS/bind-python.log" 2>&1) ||
        { echo "FAIL test_lifetime_owners.py: $LOGS/bind-python.log"; tail -n 40 "$LOGS/bind-python.log"; rc=1; }
    [ $rc -eq 0 ] && echo "ok   test_lifetime.lua, test_weights.lua, test_lifetime_owners.py under memcheck"
    return $rc
}

total_start=$SECONDS
for s in "${STEPS[@]}"; do
    case $s in
    build | valgrind | asan | tsan | fuzz | bindings) run_step "$s" "step_$s" ;;
    *) echo "unknown step: $s (steps: ${ALL_STEPS[*]})" >&2; exit 2 ;;
    esac
done

say "summary ($((SECONDS - total_start)) s)"
printf '%s\n' "${results[@]}"
exit $failed
