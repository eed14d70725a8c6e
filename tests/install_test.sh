#!/usr/bin/env bash
# agmm as another program uses it: `make install PREFIX=<tmp>`, then examples/ built against the
# installed tree with nothing but `pkg-config --cflags --libs agmm`, and again with CMake
# (examples/CMakeLists.txt: find_package(agmm), agmm::agmm), each run (the CPU world here; a CUDA
# build on a GPU runs them on the GPU), then `make uninstall`. Also: the shared library's
# soname, and that it exports exactly the functions include/agmm.h declares.
# Environment: AGMM_BUILD (the build folder, default build), AGMM_CUDA (the build's CUDA=0/1).
# Prints PASS/FAIL lines and "N passed, N failed, N skipped".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${AGMM_BUILD:-build}
passed=0 failed=0 skipped=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # check <description> <status: 0 passes>; take a condition's status into a variable first
    if [ "$2" -eq 0 ]; then echo "PASS install: $1"; passed=$((passed + 1)); else echo "FAIL install: $1"; failed=$((failed + 1)); fi
}

if ! command -v pkg-config >/dev/null; then
    echo "SKIP install: pkg-config is not installed"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

prefix=$tmp/prefix
cuda=()
[ -n "${AGMM_CUDA:-}" ] && cuda=(CUDA="$AGMM_CUDA")
# Not a sub-make of a running make: its jobserver does not reach this script.
env -u MAKEFLAGS -u MFLAGS make -s --no-print-directory -C "$root" install PREFIX="$prefix" BUILD="$build" "${cuda[@]}" \
    >"$tmp/install.log" 2>&1
rc=$?
ok=0
for f in include/agmm.h lib/libagmm.a lib/libagmm.so lib/pkgconfig/agmm.pc lib/cmake/agmm/agmmConfig.cmake \
    lib/cmake/agmm/agmmConfigVersion.cmake bin/agmm-bench; do
    [ -e "$prefix/$f" ] || ok=1
done
[ $rc -eq 0 ] && [ $ok -eq 0 ]
ok=$?
check "make install PREFIX=<tmp> installs agmm.h, libagmm.so, libagmm.a, agmm.pc, the CMake package, agmm-bench (exit $rc; $(tail -c 200 "$tmp/install.log"))" $ok

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
version=$(sed -n 's/^#define AGMM_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$root/include/agmm.h" | paste -sd.)
[ "$(pkg-config --modversion agmm 2>/dev/null)" = "$version" ]
ok=$?
check "pkg-config --modversion agmm is agmm.h's version ($version)" $ok

soname=$(readelf -d "$prefix/lib/libagmm.so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libagmm.so.${version%.*}" ] && [ -f "$prefix/lib/libagmm.so.$version" ] && [ -L "$prefix/lib/$soname" ]
ok=$?
check "libagmm.so.$version with soname '$soname' and its links" $ok

sed -n 's/^[a-z].*[ *]\(agmm_[a-z0-9_]*\)(.*/\1/p' "$root/include/agmm.h" | sort >"$tmp/declared"
nm -D --defined-only "$prefix/lib/libagmm.so" | awk '$2 ~ /^[TW]$/ { sub(/@.*/, "", $3); print $3 }' | sort >"$tmp/exported"
diff "$tmp/declared" "$tmp/exported" >"$tmp/diff"
ok=$?
check "libagmm.so exports exactly the $(wc -l <"$tmp/declared") functions agmm.h declares ($(tr '\n' ' ' <"$tmp/diff" | head -c 200))" $ok

# run_examples DIR HOW: the three examples built in DIR, run there on the CPU world.
run_examples() {
    local dir=$1 how=$2 rc ok r p rcs="" pids=()
    (cd "$dir" && ./ag_matmul_threads) >"$dir/t.out" 2>&1
    rc=$?
    grep -q "exact" "$dir/t.out" && [ $rc -eq 0 ]
    ok=$?
    check "ag_matmul_threads ($how) runs: $(tail -n 1 "$dir/t.out" | head -c 160) (exit $rc)" $ok

    (cd "$dir" && ./all_reduce_steps) >"$dir/s.out" 2>&1
    rc=$?
    grep -q "every sum exact" "$dir/s.out" && [ $rc -eq 0 ]
    ok=$?
    check "all_reduce_steps ($how) runs: $(tail -n 1 "$dir/s.out" | head -c 160) (exit $rc)" $ok

    for r in 0 1 2; do
        (cd "$dir" && exec env RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=29500 TORCHELASTIC_RUN_ID="install-test-$how-$$" AGMM_WORLD=cpu ./ag_matmul_process) \
            >"$dir/p.$r" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p"
        rcs="$rcs$?"
    done
    [ "$rcs" = 000 ] && [ "$(cat "$dir"/p.? | grep -c 'gathered A exact')" -eq 3 ]
    ok=$?
    check "ag_matmul_process ($how), 3 processes (torchrun variables, CPU world): every rank exact (exit $rcs; $(head -c 160 "$dir/p.0"))" $ok
}

# The examples, outside the repository: only the installed tree and pkg-config.
mkdir "$tmp/pc"
cp "$root"/examples/*.c "$root"/examples/*.h "$tmp/pc/"
for ex in ag_matmul_threads all_reduce_steps ag_matmul_process; do
    # shellcheck disable=SC2046
    cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags agmm) "$tmp/pc/$ex.c" -o "$tmp/pc/$ex" $(pkg-config --libs agmm) \
        >"$tmp/pc/$ex.cc" 2>&1
    ok=$?
    check "examples/$ex.c builds with \`pkg-config --cflags --libs agmm\` ($(head -c 200 "$tmp/pc/$ex.cc"))" $ok
done
run_examples "$tmp/pc" pkg-config

# The same examples through the CMake package: examples/CMakeLists.txt's find_package(agmm) and agmm::agmm.
if command -v cmake >/dev/null; then
    cp -r "$root/examples" "$tmp/cmake-src"
    { cmake -S "$tmp/cmake-src" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" &&
        cmake --build "$tmp/cmake"; } >"$tmp/cmake.log" 2>&1
    rc=$?
    found=$(sed -n 's/^-- \(agmm .* from .*\)$/\1/p' "$tmp/cmake.log")
    # The CMake package says CUDA exactly where agmm.pc defines AGMM_WITH_CUDA.
    pc_cuda=$(pkg-config --cflags agmm | grep -q AGMM_WITH_CUDA && echo ON || echo OFF)
    [ $rc -eq 0 ] && [ "$found" = "agmm $version from $prefix/lib/cmake/agmm (CUDA: $pc_cuda)" ]
    ok=$?
    check "examples/CMakeLists.txt: find_package(agmm) finds $found and builds the examples with agmm::agmm (exit $rc; $(grep -m1 -iE 'error' "$tmp/cmake.log" | head -c 200))" $ok
    run_examples "$tmp/cmake" cmake
else
    echo "SKIP install: cmake is not installed: the CMake package (examples/CMakeLists.txt) is not tried"
    skipped=$((skipped + 1))
fi

env -u MAKEFLAGS -u MFLAGS make -s --no-print-directory -C "$root" uninstall PREFIX="$prefix" BUILD="$build" "${cuda[@]}" \
    >"$tmp/uninstall.log" 2>&1
rc=$?
left=$(find "$prefix" -type f -o -type l | sed "s|$prefix/||" | tr '\n' ' ')
[ $rc -eq 0 ] && [ -z "$left" ]
ok=$?
check "make uninstall removes every installed file (left: '$left')" $ok

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
