#!/usr/bin/env bash
# The README's test command: set up (idempotently) and run the whole suite.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -k segment`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The test command runs every test: a missing Java or browser is a failure,
# not a skip (the browser tests read LOGRAFT_REQUIRE_BROWSER too).
export LOGRAFT_REQUIRE_BROWSER=1
LOGRAFT_REQUIRE_JAVA=1 bash "$ROOT/scripts/setup.sh"
PY="$ROOT/.venv/bin/python"
# The Java setup.sh chose for Spark, for every JVM the tests start.
JAVA_HOME="$(cat "$ROOT/.venv/.lograft-java-home")"
export JAVA_HOME

echo "[test] ruff check"
"$PY" -m ruff check lograft tests scripts
echo "[test] ruff format --check"
"$PY" -m ruff format --check lograft tests scripts
echo "[test] lint-imports (the layering: [tool.importlinter] in pyproject.toml)"
"$ROOT/.venv/bin/lint-imports" --no-logo
echo "[test] mypy (strict on errors, typed, protocol, storage, quorum: [tool.mypy] in pyproject.toml)"
"$PY" -m mypy
echo "[test] C record scanner (scripts/check_native.py: built, and of this checkout's ABI)"
"$PY" scripts/check_native.py
# The pure-Python fallback is for installs without a compiler; the test
# command insists on the C extension (tests/unit/protocol read this too).
export LOGRAFT_REQUIRE_C_EXTENSION=1
# Bytecode is cached (__pycache__, git-ignored) even where the environment
# says not to: the suite starts hundreds of Python processes (nodes, scripts,
# the module-import check's child), and without the cache each one compiles
# lograft from source again (the import check alone: 33 s of CPU without, 15 s
# with, on this 2-core machine).
unset PYTHONDONTWRITEBYTECODE
echo "[test] pytest"
set +e
# --durations: the slowest tests, so the suite's time stays in view.
"$PY" -m pytest -q -p no:cacheprovider --durations=20 "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "[test] pytest collected no tests" >&2
fi
exit $rc
