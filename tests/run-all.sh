#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, then
#   0. checks that every tracked C++ source is formatted as .clang-format says (tests/check-format.sh);
#   1. builds with g++ (warnings are errors) and runs every test under ctest;
#   2. builds with clang, AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer (beside step
#      1's tests, at idle priority), runs the same tests again (except those labelled slow),
#      replays every fuzz corpus, and fuzzes each target for a bounded time.
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

build_suite() {  # build-dir cmake-args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

test_suite() {  # name build-dir ctest-args
  local name=$1 dir=$2 ctest_args=$3
  echo "== ${name}: tests"
  # shellcheck disable=SC2086 # ctest_args is a list of words
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 900 $ctest_args | tee "$dir/ctest.log"
  summary+=("${name}: $(grep -E 'tests passed' "$dir/ctest.log")")
}

sanitize=1
[[ "${OT_SKIP_SANITIZE:-0}" == 1 ]] && sanitize=0
asan_name="clang asan+ubsan+fuzz"
asan_build_pid=""
asan_build_log=""
# The sanitizer build runs in a process group of its own; a run that stops early takes it down.
stop_asan_build() {
  if [[ -n $asan_build_pid ]]; then kill -- "-$asan_build_pid" 2>/dev/null || true; fi
}
trap stop_asan_build EXIT

# -g1 (line tables, no variable info): a failing test's backtrace still names files and lines, and
# the build takes about a fifth less time than with full debug info, which no test reads.
echo "== gcc: configure and build (build)"
build_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"

if [[ $sanitize == 1 ]]; then
  # The sanitizer build starts now, beside the g++ tests, at the idle scheduling class (SCHED_IDLE):
  # it runs only on CPU time the tests leave, and a test's process that wakes takes the CPU from it
  # at once. The integration entries spend most of their time waiting on timers of the spec, so
  # most of this build is done by the time the g++ tests end. Its output goes to a log, printed
  # after the g++ tests.
  # Line tables only (-gline-tables-only): the sanitizers' reports name files and lines from them.
  # One ctest entry per doctest file, not per case (OT_CTEST_PER_FILE): a sanitized test process
  # costs up to 0.6 s to start and leak-check, which ~1,200 entries paid ~12 minutes of CPU for.
  # No benches or load tool (OT_BUILD_TOOLS=OFF): the g++ pass builds them, nothing here runs them.
  echo "== ${asan_name}: configure and build (build-asan), at idle priority beside the g++ tests"
  mkdir -p build-asan
  asan_build_log=build-asan/build.log
  # Job control (set -m) gives it a process group of its own for stop_asan_build, in the same
  # session: setsid would put it in a scheduler autogroup of its own, with a fair share of the
  # CPU against the tests, which is what SCHED_IDLE is there to prevent. The subshell moves
  # itself to SCHED_IDLE; what it starts inherits the class.
  set -m
  (chrt --idle --pid 0 "$BASHPID"; build_suite build-asan -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DOT_SANITIZE=ON -DOT_FUZZ=ON \
    -DOT_CTEST_PER_FILE=ON -DOT_BUILD_TOOLS=OFF \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only) \
    >"$asan_build_log" 2>&1 </dev/null &
  asan_build_pid=$!
  set +m
fi

test_suite "gcc" build ""

if [[ $sanitize == 1 ]]; then
  echo "== ${asan_name}: waiting for its build"
  asan_status=0
  wait "$asan_build_pid" || asan_status=$?
  asan_build_pid=""
  cat "$asan_build_log"
  if [[ $asan_status != 0 ]]; then
    echo "the sanitizer build failed (exit ${asan_status}); its output is above" >&2
    exit 1
  fi
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The sanitizer pass runs everything but the tests labelled slow (ACME against Pebble with its
  # two-minute lease wait, the fault-injection suite): those run in the g++ pass above.
  test_suite "$asan_name" build-asan "-LE slow"

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
