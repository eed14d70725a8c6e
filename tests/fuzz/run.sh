#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) and runs each for a
# bounded time from its corpus: tests/fuzz/corpus/cli/ and tests/fuzz/corpus/desc/ (replayed first,
# every run).
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]      default 25; CI runs both targets in <= 60 s
#
# Targets: fuzz_cli (agmm-bench's command line), fuzz_desc (descriptors, world configs, fault specs,
# the message formatter). New inputs that reach new code go to build-fuzz/corpus/<target>/, not into
# the tree. A crash stops the run with the input saved as build-fuzz/crash-<target>-<hash>: fix the
# bug, then keep that file in the target's corpus folder so every later run replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-25}
B=build-fuzz
CC=${FUZZ_CC:-clang}
SAN=address,undefined
# The library as make builds it, instrumented for the fuzzer (coverage) and the sanitizers.
make -s -j2 CC="$CC" CUDA=0 BUILD=$B SAN=fuzzer-no-link,$SAN $B/libagmm.a
flags=(-std=c11 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -Itools -fno-omit-frame-pointer -fno-sanitize-recover=all)
# agmm-bench's files without its main (bench_parse is the target's entry).
tools=()
for f in tools/*.c; do
    o=$B/fuzz-tools/$(basename "${f%.c}").o
    mkdir -p "$(dirname "$o")"
    "$CC" "${flags[@]}" -fsanitize=fuzzer-no-link,$SAN -Dmain=agmm_bench_main -c "$f" -o "$o"
    tools+=("$o")
done
"$CC" "${flags[@]}" -fsanitize=fuzzer,$SAN tests/fuzz/fuzz_cli.c "${tools[@]}" $B/libagmm.a -pthread -lm -o $B/fuzz_cli
"$CC" "${flags[@]}" -fsanitize=fuzzer,$SAN tests/fuzz/fuzz_desc.c $B/libagmm.a -pthread -lm -o $B/fuzz_desc

status=0
for t in fuzz_cli fuzz_desc; do
    corpus=tests/fuzz/corpus/${t#fuzz_}
    mkdir -p $B/corpus/$t
    echo "== $t: ${secs} s from $corpus"
    # -close_fd_mask=3: the parser's --help and error messages would flood the log.
    if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ./$B/$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=0 \
        -artifact_prefix=$B/crash-$t- $B/corpus/$t "$corpus" 2>$B/$t.log; then
        tail -n 60 $B/$t.log
        echo "FAIL $t (log above; a crashing input is saved as $B/crash-$t-*)"
        status=1
    else
        grep -E "^Done [0-9]+ runs" $B/$t.log || true
        echo "PASS $t: no crash in ${secs} s"
    fi
done
exit $status
