#!/usr/bin/env bash
# The whole test suite: set up what is missing, then pytest. Extra arguments go to pytest (one process).
# With none, the suite runs as two pytest processes at once (tests/partition.py): the lab tests one after
# another, and beside them, at the lowest CPU priority, the files that need no lab; the second's output
# follows the first's. Either failing fails the suite.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$ROOT/scripts/setup.sh" || exit $?
cd "$ROOT"
PYTEST=("$ROOT/.venv/bin/python" -m pytest)

# pytest's exit status, exit 5 (nothing collected) made a failure that says so
checked() {
  local status="$1" what="$2"
  if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests${what:+ ($what)} (exit 5)" >&2
    return 1
  fi
  return "$status"
}

if [ "$#" -gt 0 ]; then
  "${PYTEST[@]}" "$@"
  checked $? ""
  exit $?
fi

beside_log="$(mktemp /tmp/testbed-tests-beside.XXXXXX.log)"
beside_tmp="$(mktemp -d /tmp/testbed-tests-beside.XXXXXX)"
# Job control: each pytest in a process group of its own, with SIGINT as pytest expects it (a background job
# of a script otherwise ignores it). Ctrl-C or a TERM reaches this script alone, which passes SIGINT on once to
# each: pytest then tears down what its fixtures made (labs) before it exits.
set -m
TESTBED_TEST_PARTITION=beside nice -n 19 "${PYTEST[@]}" -p no:cacheprovider --basetemp "$beside_tmp" \
  >"$beside_log" 2>&1 &
beside_pid=$!
TESTBED_TEST_PARTITION=labs "${PYTEST[@]}" &
labs_pid=$!

stop() {
  trap '' INT TERM
  echo "test.sh: stopping both pytest processes" >&2
  kill -INT "$labs_pid" "$beside_pid" 2>/dev/null
  wait "$labs_pid" "$beside_pid"
  rm -rf "$beside_tmp" "$beside_log"
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM

wait "$labs_pid"
checked $? "the lab tests"
labs_status=$?
if kill -0 "$beside_pid" 2>/dev/null; then
  echo "test.sh: waiting for the tests beside the lab tests ($beside_log)"
fi
wait "$beside_pid"
beside_status=$?
trap - INT TERM
echo
echo "================ the tests run beside the lab tests (tests/partition.py) ================"
cat "$beside_log"
rm -f "$beside_log"
checked "$beside_status" "beside the lab tests"
beside_status=$?
if [ "$beside_status" -eq 0 ]; then
  rm -rf "$beside_tmp"
else
  echo "test.sh: the beside tests' temporary files are kept in $beside_tmp" >&2
fi
if [ "$labs_status" -ne 0 ]; then
  exit "$labs_status"
fi
exit "$beside_status"
