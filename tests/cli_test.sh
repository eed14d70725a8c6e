#!/usr/bin/env bash
# agmm-bench's command line: every bad argument gets a message naming it and exit status 2; a
# small CPU run prints the table and writes CSV/JSON. Prints PASS/FAIL lines and a summary.
set -u
bench=${AGMM_BENCH:-build/agmm-bench}
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # check <description> <condition-status>
    if [ "$2" -eq 0 ]; then echo "PASS cli: $1"; passed=$((passed + 1)); else echo "FAIL cli: $1"; failed=$((failed + 1)); fi
}

# bad <what the message must name> <args...>: exit 2, message on stderr naming the argument.
bad() {
    local name=$1; shift
    "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    grep -q -- "$name" "$tmp/err"
    local named=$?
    [ $rc -eq 2 ] && [ $named -eq 0 ]
    local ok=$? # taken now: a $(...) in check's arguments would reset $? before it is read
    check "'$*' -> exit 2 naming $name (got $rc: $(head -c 160 "$tmp/err"))" $ok
}

bad --op --op gemm
bad K=100 --world cpu --shape 64,64,100
bad "--shape 0,64,64: must be M,N,K" --world cpu --shape 0,64,64
bad --shape --world cpu --shape 64,64
bad --shape --world cpu --shape 64,x,64
bad --ranks --ranks 0
bad --ranks --ranks 65
bad --warmup --warmup -1
bad --iters --iters 0
bad bogus --backends nccl,bogus
bad --world --world moon
bad --b-layout --b-layout diagonal
bad --dtype --op all_reduce --dtype int8
bad --timeout --timeout 0
bad --frobnicate --frobnicate
bad --csv --csv
bad --sizes --sizes 10
bad --shape --op all_reduce --shape 8,8,8
bad --sizes --op all_reduce --sizes 0
bad --splits --splits 0
bad --shapes --shapes 512:256:128
bad "multiple of 8" --world cpu --b-layout row --shape 8,12,8
# Checked once the whole command line is read: layout and splits may follow --shape.
bad "multiple of 8" --world cpu --shape 8,12,8 --b-layout row
bad splits=100 --world cpu --shape 64,64,64 --splits 100
bad "--splits 100" --world cpu --splits 100
bad --turns --turns 0
bad "--turns 4: must be at most --iters (3)" --world cpu --iters 3 --turns 4
bad "--turns 6: must be at most --iters (5, this world's default)" --world cpu --turns 6
bad --shape --world cpu --shape "2^,8,8"
bad one_shot --world cpu --op ag_matmul --backends one_shot
bad "listed twice" --world cpu --backends nccl,ce,nccl
# all_reduce_rmsnorm's rows: every T with every H, each checked with the library's rules.
bad "hidden=100 is not a multiple of 8" --op all_reduce_rmsnorm --tokens 3 --hidden 100
bad "--tokens and --hidden go together" --op all_reduce_rmsnorm --tokens 3
bad "--tokens" --op all_reduce_rmsnorm --tokens 0 --hidden 64
bad "--eps 0" --op all_reduce_rmsnorm --eps 0
bad "--eps 1e-50: eps=1e-50: must be > 0 and finite, and stay so as fp32" --op all_reduce_rmsnorm --tokens 1 \
    --hidden 8 --eps 1e-50
# eps is checked before the sweep for the default rows too; fp32's range is printed in full.
bad "--eps 1e-50: eps=1e-50: must be > 0" --world cpu --op all_reduce_rmsnorm --eps 1e-50
bad "--eps 3.4028236e38: eps=3.4028236e+38: must be > 0 and finite, and stay so as fp32 (1.40129846e-45 to 3.40282347e+38)" \
    --world cpu --op all_reduce_rmsnorm --eps 3.4028236e38
bad "--tokens: applies to --op all_reduce_rmsnorm, not all_reduce" --op all_reduce --tokens 3 --hidden 8
bad "--sizes" --op all_reduce_rmsnorm --sizes 8
bad "--dtype" --op all_reduce_rmsnorm --dtype fp32
bad ce --world cpu --op all_reduce_rmsnorm --backends ce

# An option of other operations than --op's is refused, even at its default value.
for args in "matmul_reduce_scatter --splits 1" "matmul_all_reduce --splits 1" "all_reduce --splits 1" \
            "all_reduce_rmsnorm --splits 1" "ag_matmul --dtype bf16" "matmul_reduce_scatter --dtype bf16" \
            "matmul_all_reduce --dtype bf16" "all_reduce_rmsnorm --dtype bf16" "all_reduce --b-layout col" \
            "all_reduce_rmsnorm --b-layout col" "ag_matmul --eps 1e-6" "all_reduce --eps 1e-6" \
            "matmul_all_reduce --eps 1e-6" "all_reduce --shapes 64:64:1" "all_reduce_rmsnorm --shape 8,8,8" \
            "matmul_reduce_scatter --sizes 8" "ag_matmul --hidden 8"; do
    op=${args%% *} opt=${args#* }
    # shellcheck disable=SC2086 # the option and its value are two words
    bad "${opt%% *}: applies to --op .*, not $op" --world cpu --op "$op" $opt
done
# Lists: which item is wrong, or how many there may be.
bad "--sizes .*: too many items (at most 256)" --op all_reduce --sizes "$(seq -s, 1 257)"
bad "--backends nccl,,ce: an empty item" --backends nccl,,ce
bad "item 'aaaaaaaaaaaaaaaa...' is longer than 31 characters" --backends "$(printf 'a%.0s' $(seq 33))"
bad "item '1234567890123456...' is longer than 31 characters" --shape "$(printf '1234567890%.0s' 1 2 3 4),8,8"
bad "--shape 8,8,8,8: too many items (at most 3)" --shape 8,8,8,8
# A value is never an option; a negative number is a value (and checked as one). The bad shape last
# keeps a parser that takes the option as a file name from writing it here after a sweep.
bad "--csv: needs a value, got the option --check" --world cpu --csv --check --shape 0,8,8
bad "--json: needs a value, got --x (values never start with --)" --world cpu --json --x --shape 0,8,8
bad "--fault: needs a value, got the option --help" --fault --help
bad "--warmup -1: must be an integer in 0..1000000" --warmup -1
bad "--csv: needs a file name, not an empty string" --world cpu --csv ""
bad "--json: needs a file name, not an empty string" --world cpu --json ""
bad "--fault: needs a spec" --world cpu --fault ""
# Every option but --shape is given at most once.
bad "--tokens: is given twice" --op all_reduce_rmsnorm --tokens 1 --tokens 7 --hidden 8
bad "--hidden: is given twice" --op all_reduce_rmsnorm --tokens 1 --hidden 8 --hidden 16
bad "--shapes: is given twice" --shapes 64:64:1 --shapes 128:128:1
bad "--op: is given twice" --op all_reduce --op ag_matmul
# The library's range of timeouts.
bad "--timeout 86400.5: must be seconds in 0.001..86400" --timeout 86400.5
bad "--timeout 0.0009: must be seconds in 0.001..86400" --timeout 0.0009
"$bench" --world cpu --ranks 2 --shape 8,8,8 --check --timeout 86400 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--timeout 86400 (the library's largest) is accepted: exit 0 (got $rc: $(head -c 160 "$tmp/err"))" $rc

bad "--bogus-flag: unknown option" --bogus-flag
bad "--bogus-flag: unknown option" --bogus-flag x
bad "--fault rank=x" --fault "rank=x,at=run,action=exit"
bad "the grammar is rank=R,at=POINT,action=ACTION" --fault "rank=1,at=run"
bad "action=delay needs ms=N" --fault "rank=1,at=run,action=delay"
AGMM_FAULT="rank=1,at=nowhere,action=exit" bad "AGMM_FAULT rank=1,at=nowhere" --world cpu

# Every option --help shows with a value says so when the value is missing: the help text is
# agmm-bench's table of options, so an option missing from it would be "unknown".
missing=""
for opt in $("$bench" --help | sed -n -E 's/^  (--[a-z-]+) [A-Z].*/\1/p'); do
    "$bench" "$opt" >/dev/null 2>"$tmp/err"
    grep -q -- "$opt: needs a value" "$tmp/err" || missing="$missing $opt"
done
check "every option with a value in --help says \"needs a value\" without one (wrong:${missing:- none})" \
    $([ -z "$missing" ]; echo $?)

# Output files are checked before the sweep: nothing runs, nothing is printed to stdout.
for args in "--csv /nonexistent-agmm/x.csv|its folder /nonexistent-agmm does not exist" \
            "--json $tmp|is a directory"; do
    opt=${args%%|*} want=${args#*|}
    # shellcheck disable=SC2086 # the option and its path are two words
    "$bench" --world cpu $opt >"$tmp/out" 2>"$tmp/err"
    rc=$?
    grep -q -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ]
    check "'$opt' -> exit 2 before the sweep, naming why (got $rc: $(head -c 160 "$tmp/err"))" \
        $(( rc != 2 || $? != 0 ))
done

# Too big for memory: a message with both numbers within seconds, never an OOM kill (exit 137).
t0=$SECONDS
timeout 60 "$bench" --world cpu --shape 1000000,8192,8192 >"$tmp/out" 2>"$tmp/err"
rc=$?
grep -q "needs .* of host memory (.* per rank x 4 ranks sharing it), but .* is available (" "$tmp/out"
check "--shape 1000000,8192,8192 on the CPU: exit 1 in $((SECONDS - t0)) s with the memory needed and available (got $rc)" \
    $(( rc != 1 || $? != 0 || SECONDS - t0 > 10 ))

# Faults through --fault: a rank that leaves fails the cell (its peers time out, bounded by
# --timeout); a delay changes nothing.
timeout 60 "$bench" --world cpu --ranks 3 --shape 32,16,16 --backends ce --warmup 0 --iters 1 --timeout 0.3 \
    --fault rank=1,at=run,action=exit >"$tmp/out" 2>"$tmp/err"
rc=$?
grep -q "rank 1: .*injected fault (AGMM_FAULT): exit at run" "$tmp/out"
check "--fault rank=1,at=run,action=exit: exit 1, the injected fault in the table (got $rc)" $(( rc != 1 || $? != 0 ))
timeout 60 "$bench" --world cpu --ranks 3 --shape 32,16,16 --warmup 1 --iters 2 --timeout 2 \
    --fault rank=2,at=run,action=delay,ms=20 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--fault rank=2,at=run,action=delay,ms=20: every cell correct, exit 0 (got $rc; $(tail -c 200 "$tmp/err"))" $rc

"$bench" --help >"$tmp/out" 2>&1
rc=$?
grep -q -- "--shape M,N,K" "$tmp/out" && grep -q -- "--timeout SEC .* 0.001..86400" "$tmp/out" &&
    grep -q -- "^Every option but --shape is given at most once" "$tmp/out"
check "--help exits 0, lists the options, the timeout's range and the rule of repeats (got $rc)" $(( rc != 0 || $? != 0 ))

"$bench" --world cpu --ranks 3 --shape 40,24,16 --shape 64,72,32 --warmup 1 --iters 2 \
    --csv "$tmp/r.csv" --json "$tmp/r.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "CPU ag_matmul run exits 0 (got $rc; $(tail -c 200 "$tmp/err"))" $rc
grep -q "running on the CPU" "$tmp/out"; check "CPU run prints the CPU banner" $?
grep -q "Best Backend" "$tmp/out"; check "CPU run prints the seed table header" $?
grep -q "(64, 72, 32)" "$tmp/out"; check "CPU run prints every shape" $?
nb=$("$bench" --list-backends | grep -c '^| ag_matmul |')
[ "$(grep -c '^ag_matmul,cpu,3,' "$tmp/r.csv")" -eq $((2 * nb)) ]; check "CSV has one line per shape and backend ($((2 * nb)))" $?
grep -q '"rows": \[' "$tmp/r.json"; check "JSON written" $?
# Every ok cell's TFLOP/s is a positive number, however small (column 14).
awk -F, 'NR > 1 && $9 == "ok" && !($14 > 0) { bad = 1 } END { exit bad }' "$tmp/r.csv"
check "CSV TFLOP/s of ok cells are positive" $?
python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/r.json" 2>/dev/null
check "JSON parses" $?

# A row's figures take turns: every CSV line says in how many rounds (the --iters 2 above: 2) and
# that the row was held whole (alone = 0); --alone holds one backend at a time (alone = 1).
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["turns"] != 2 || $c["alone"] != 0 { bad = 1 }
         END { exit bad || NR < 2 }' "$tmp/r.csv"
check "CSV: every line of a row held whole says turns=2 (= --iters 2), alone=0" $?
"$bench" --world cpu --ranks 3 --shape 40,24,16 --warmup 1 --iters 3 --turns 3 --alone --csv "$tmp/alone.csv" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["state"] != "ok" || $c["turns"] != 3 || $c["alone"] != 1 { bad = 1 }
         END { exit bad || NR < 2 }' "$tmp/alone.csv"
check "--alone: every cell ok, its lines say turns=3, alone=1 (got $rc; $(tail -c 200 "$tmp/err"))" $(( rc != 0 || $? != 0 ))
# The rounds rotate: a 400 ms delay on rank 0's every run makes the row long enough for rank 0 to
# tell each phase (bench_progress.h: after 3 s), so the order of nccl's and ce's blocks in each
# told round shows. The figures are the plain GEMM, nccl and ce; round r (from 1) starts at figure
# (r - 1) mod 3: nccl before ce where that is 0 or 1, ce before nccl where it is 2.
timeout 120 "$bench" --world cpu --ranks 2 --shape 32,16,16 --backends nccl,ce --warmup 0 --iters 9 --turns 9 \
    --no-flush --fault rank=0,at=run,action=delay,ms=400 >"$tmp/out" 2>"$tmp/err"
rc=$?
order=$(sed -n -E 's/.*, (nccl|ce): timing runs, round ([0-9]+) of 9 .*/\2 \1/p' "$tmp/err" |
    awk '{ if (!($1 in first)) first[$1] = $2; else both[$1] = 1 }
         END { for (r in both) { want = (r - 1) % 3 == 2 ? "ce" : "nccl"; if (first[r] != want) bad++; else good[want]++ }
               printf "%d %d %d", bad + 0, good["nccl"] + 0, good["ce"] + 0 }')
read -r wrong nccl_first ce_first <<<"$order"
[ $rc -eq 0 ] && [ "$wrong" -eq 0 ] && [ "$nccl_first" -ge 1 ] && [ "$ce_first" -ge 1 ]
check "--turns 9: the told rounds rotate (rounds in the wrong order: $wrong; nccl first: $nccl_first, ce first: $ce_first; exit $rc)" $?

# A row held whole whose plans or buffers then find no memory (agmm-bench's estimate leaves out what
# plans hold of their own) is run again one backend at a time, not failed. Made real with a data
# limit (prlimit --data: the rank threads' heaps, the CPU world's device buffers): the smallest
# limit under which --alone runs (within 8 MB), then the first limit above it, in steps of 16 MB,
# under which the row held whole runs: a whole row needs ~80 MB more than one cell here, so it
# passes there only by its run one at a time (alone = 1 on every line).
if command -v prlimit >/dev/null; then
    under() { # under MB [args]: agmm-bench's row at a data limit of MB
        local mb=$1; shift
        prlimit --data=$((mb * 1048576)) "$bench" --world cpu --ranks 2 --shape 2048,64,1024 --warmup 0 --iters 1 \
            --turns 1 --csv "$tmp/lim.csv" "$@" >"$tmp/out" 2>"$tmp/err"
    }
    lo=64 hi=4096
    while [ $((hi - lo)) -gt 8 ]; do
        mid=$(((lo + hi) / 2))
        if under $mid --alone; then hi=$mid; else lo=$mid; fi
    done
    passed_at="" lines=""
    for mb in $(seq $((hi + 16)) 16 $((hi + 256))); do
        if under "$mb"; then
            passed_at=$mb lines=$(awk -F, 'NR > 1 { printf "%s/%s ", $9, $NF }' "$tmp/lim.csv")
            break
        fi
    done
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["state"] != "ok" || $c["alone"] != 1 { bad = 1 }
             END { exit bad || NR != 5 }' "$tmp/lim.csv" && [ -n "$passed_at" ] &&
        grep -q "timed alone: too big to hold every backend at once" "$tmp/out"
    check "a row held whole that runs out of memory runs again one backend at a time (--alone runs under ${hi} MB, the row first under ${passed_at:-none}: state/alone $lines)" $?
else
    echo "SKIP cli: no prlimit here: a whole row short of memory is not tested"
fi

# The auto column shows the backend auto chose next to its time (the static rule in the CPU world:
# ce), the CSV says which and how (columns 25, 26), and auto is never the Best Backend (column 23).
"$bench" --world cpu --ranks 2 --shape 40,24,16 --backends ce,auto --warmup 0 --iters 1 \
    --csv "$tmp/auto.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -qE '^\(40, 24, 16\) +bf16 +[0-9.]+ +[0-9.]+ \(ce\)  ce$' "$tmp/out" &&
    awk -F, '$8 == "auto" { n++; if ($27 != "ce" || $28 != "static" || $23 != 0) bad = 1 } END { exit bad || n != 1 }' "$tmp/auto.csv"
check "auto column: 'time (ce)' in the table, chose=ce how=static in the CSV, never best (got $rc)" $?

# A cell that could not run has no error figure (column 21), not a 0 that reads as exact.
"$bench" --world cpu --op all_reduce --ranks 2 --sizes 2^40,8 --backends one_shot --warmup 0 --iters 1 \
    --csv "$tmp/e.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && awk -F, '$9 == "ERROR" { n++; if ($21 != "") bad = 1 } END { exit bad || n != 1 }' "$tmp/e.csv" &&
    grep -q "needs .* of host memory .* is available" "$tmp/e.csv"
check "a cell too big for memory (2^40 elements) exits 1, says so, with an empty err in the CSV (got $rc)" $?

"$bench" --world cpu --op all_reduce --ranks 5 --sizes 1,7,4093 --dtype fp32 --warmup 0 --iters 1 \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
check "CPU all_reduce run exits 0 (got $rc; $(tail -c 200 "$tmp/err"))" $rc
grep -q "busbw" "$tmp/out"; check "all_reduce table has busbw" $?

# The row-parallel matmuls: odd shapes (M < W, M not divisible by W, odd N) checked and timed on
# every CPU backend, one CSV line per shape and backend; their own shape check.
for op in matmul_reduce_scatter matmul_all_reduce; do
    "$bench" --world cpu --op $op --ranks 3 --shape 2,33,16 --shape 40,24,72 --warmup 0 --iters 1 \
        --csv "$tmp/$op.csv" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    nb=$("$bench" --list-backends | grep -c "^| $op |")
    rows=$(grep -c -E '^\((2, 33, 16|40, 24, 72)\) +bf16( +[0-9.]+)+  [a-z_]+$' "$tmp/out")
    [ $rc -eq 0 ] && [ "$rows" -eq 2 ] && [ "$(grep -c "^$op,cpu,3," "$tmp/$op.csv")" -eq $((2 * nb)) ]
    check "CPU $op run: exit 0, both odd shapes timed on its $nb backends with a Best Backend, CSV lines (got $rc, $rows rows; $(tail -c 200 "$tmp/err"))" $?
done
# The check of the sum is relative to the scale of the partials, not of S: at W = 3, N = 1 the
# partials cancel and their bf16 rounding is a large part of S, yet right (docs/matmul_reduce.md,
# "The sum").
for op in matmul_all_reduce matmul_reduce_scatter; do
    "$bench" --world cpu --ranks 3 --op $op --shape 1,1,8 --check >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ! grep -q WRONG "$tmp/out"
    ok=$?
    check "CPU $op --ranks 3 --shape 1,1,8 --check: exit 0, no WRONG (got $rc; $(grep -o 'WRONG.*' "$tmp/out" | head -n 1))" $ok
done
bad "matmul_reduce_scatter: K=12" --world cpu --op matmul_reduce_scatter --shape 8,8,12
bad "matmul_all_reduce: N=12 is not a multiple of 8" --world cpu --op matmul_all_reduce --b-layout row --shape 8,12,8
bad --sizes --op matmul_all_reduce --sizes 8
"$bench" --world cpu --op all_reduce_rmsnorm --ranks 3 --tokens 1,7 --hidden 264,1032 --backends nccl,one_shot,two_shot,auto \
    --warmup 0 --iters 1 --csv "$tmp/arn.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
rows=$(grep -cE '^[0-9]+ x [0-9]+ +bf16 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ \(one_shot\) ' "$tmp/out")
[ $rc -eq 0 ] && [ "$rows" -eq 4 ] && [ "$(grep -c '^all_reduce_rmsnorm,cpu,3,[17],' "$tmp/arn.csv")" -eq 16 ]
check "CPU all_reduce_rmsnorm run (T 1,7 x H 264,1032): exit 0, 4 rows timed for nccl, one_shot, two_shot and auto (one_shot), 16 CSV lines (got $rc, $rows rows; $(tail -c 200 "$tmp/err"))" $?

# The README's backend table is the library's table as agmm-bench prints it, verbatim.
"$bench" --list-backends >"$tmp/lb" 2>"$tmp/err"
rc=$?
sed -n '/<!-- backends: begin -->/,/<!-- backends: end -->/p' "$(dirname "$0")/../README.md" | sed '1d;$d' >"$tmp/rt"
[ $rc -eq 0 ] && [ -s "$tmp/lb" ] && cmp -s "$tmp/lb" "$tmp/rt"
check "README's backend table is agmm-bench --list-backends verbatim (got $rc; regenerate it from that output)" $?

# The README's list of environment variables is the library's knob table, verbatim, and the library
# reads AGMM_* variables only through that table.
"$bench" --list-knobs >"$tmp/lk" 2>"$tmp/err"
rc=$?
sed -n '/<!-- knobs: begin -->/,/<!-- knobs: end -->/p' "$(dirname "$0")/../README.md" | sed '1d;$d' >"$tmp/rk"
[ $rc -eq 0 ] && [ -s "$tmp/lk" ] && cmp -s "$tmp/lk" "$tmp/rk"
check "README's environment list is agmm-bench --list-knobs verbatim (got $rc; regenerate it from that output)" $?
"$bench" --help | grep -q "^  AGMM_TIMEOUT_S  *a number in"
check "agmm-bench --help lists the knobs" $?
src=$(dirname "$0")/../src
direct=$(grep -rn 'getenv("AGMM_' "$src" "$(dirname "$0")/../tools" | grep -v 'src/core/knobs.c')
[ -z "$direct" ]
check "no AGMM_* variable is read outside the knob table (src/core/knobs.c): ${direct:-none}" $?
AGMM_TIMEOUT_S=0 "$bench" --world cpu --check >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "AGMM_TIMEOUT_S=0: must be a number in" "$tmp/err"
check "a bad knob (AGMM_TIMEOUT_S=0) exits 2 naming it before any device starts (got $rc: $(head -c 200 "$tmp/err"))" $?

# The sanitizer's plan in docs/architecture.md is agmm-gputest's, verbatim (a CUDA build has it).
gputest=${AGMM_BUILD:-build}/agmm-gputest
if [ -x "$gputest" ]; then
    "$gputest" sanitize-plan >"$tmp/sp" 2>"$tmp/err"
    rc=$?
    sed -n '/<!-- sanitize-plan: begin -->/,/<!-- sanitize-plan: end -->/p' "$(dirname "$0")/../docs/architecture.md" |
        sed '1d;$d' >"$tmp/dp"
    [ $rc -eq 0 ] && [ -s "$tmp/sp" ] && cmp -s "$tmp/sp" "$tmp/dp"
    check "docs/architecture.md's sanitizer plan (which groups run at W = 1 only) is agmm-gputest sanitize-plan verbatim (got $rc; regenerate it from that output)" $?
else
    echo "SKIP cli: no $gputest (a build without CUDA): the sanitizer plan in docs/ is not compared"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
