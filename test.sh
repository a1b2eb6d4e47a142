#!/usr/bin/env bash
# The whole test suite: set up what is missing, then pytest. Extra arguments go to pytest.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$ROOT/scripts/setup.sh" || exit $?
cd "$ROOT"
"$ROOT/.venv/bin/python" -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests (exit 5)" >&2
  exit 1
fi
exit "$status"
