#!/usr/bin/env bash
# The README's test command: set up (idempotently) and run the whole suite.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -k segment`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOGRAFT_EXTRAS=dev bash "$ROOT/scripts/setup.sh"
PY="$ROOT/.venv/bin/python"

echo "[test] ruff check"
"$PY" -m ruff check lograft tests scripts
echo "[test] pytest"
set +e
"$PY" -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "[test] pytest collected no tests" >&2
fi
exit $rc
