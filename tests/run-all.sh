#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, then
#   0. checks that every tracked C++ source is formatted as .clang-format says (tests/check-format.sh);
#   1. builds with g++ (warnings are errors) and runs every test under ctest;
#   2. builds with clang, AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer, runs the
#      same tests again (except those labelled slow), replays every fuzz corpus, and fuzzes each
#      target for a bounded time.
# Environment: OT_JOBS (build parallelism, default nproc), OT_FUZZ_SECONDS (per target, default 10;
# 0 skips the timed fuzzing), OT_SKIP_SANITIZE=1 (only step 1, for a quick local run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash deploy/install-deps.sh
bash tests/check-format.sh

jobs=${OT_JOBS:-$(nproc)}
fuzz_seconds=${OT_FUZZ_SECONDS:-10}
summary=()

run_suite() {  # name build-dir ctest-args cmake-args...
  local name=$1 dir=$2 ctest_args=$3
  shift 3
  echo "== ${name}: configure and build (${dir})"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  echo "== ${name}: tests"
  # shellcheck disable=SC2086 # ctest_args is a list of words
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 900 $ctest_args | tee "$dir/ctest.log"
  summary+=("${name}: $(grep -E 'tests passed' "$dir/ctest.log")")
}

# -g1 (line tables, no variable info): a failing test's backtrace still names files and lines, and
# the build takes about a fifth less time than with full debug info, which no test reads.
run_suite "gcc" build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"

if [[ "${OT_SKIP_SANITIZE:-0}" != 1 ]]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The sanitizer pass runs everything but the tests labelled slow (ACME against Pebble with its
  # two-minute lease wait, the fault-injection suite): those run in the g++ pass above.
  # Line tables only (-gline-tables-only): the sanitizers' reports name files and lines from them.
  # One ctest entry per doctest file, not per case (OT_CTEST_PER_FILE): a sanitized test process
  # costs up to 0.6 s to start and leak-check, which ~1,200 entries paid ~12 minutes of CPU for.
  # No benches or load tool (OT_BUILD_TOOLS=OFF): the g++ pass builds them, nothing here runs them.
  run_suite "clang asan+ubsan+fuzz" build-asan "-LE slow" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DOT_SANITIZE=ON -DOT_FUZZ=ON \
    -DOT_CTEST_PER_FILE=ON -DOT_BUILD_TOOLS=OFF \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only

  if [[ "$fuzz_seconds" != 0 ]]; then
    fuzzed=0
    for corpus in tests/fuzz/corpus/*/; do
      name=$(basename "$corpus")
      echo "== fuzzing ${name} for ${fuzz_seconds}s"
      # New inputs go to a scratch directory; a crash leaves crash-* in build-asan/fuzz-artifacts,
      # which the developer adds to the corpus as a regression test.
      scratch=$(mktemp -d)
      mkdir -p build-asan/fuzz-artifacts
      log="build-asan/fuzz-artifacts/${name}.log"
      status=0
      "build-asan/tests/fuzz/fuzz_${name}" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
        -artifact_prefix=build-asan/fuzz-artifacts/"${name}"- "$scratch" "$corpus" >"$log" 2>&1 ||
        status=$?
      grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|SUMMARY)' "$log" || true
      rm -rf "$scratch"
      if [[ $status != 0 ]]; then
        tail -n 40 "$log" >&2
        echo "fuzzing ${name} found a crash: see build-asan/fuzz-artifacts/" >&2
        exit 1
      fi
      fuzzed=$((fuzzed + 1))
    done
    summary+=("fuzzing: ${fuzzed} targets, ${fuzz_seconds}s each, no crash")
  fi
fi

echo "== summary"
printf '%s\n' "${summary[@]}"
# One plain closing line over every suite (ctest already failed the run on any failure).
total=0 failed=0
for log in build/ctest.log build-asan/ctest.log; do
  [[ -f $log ]] || continue
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n 1)
  failed=$((failed + $(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")))
  total=$((total + $(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")))
done
echo "tests: $((total - failed)) passed, ${failed} failed"
