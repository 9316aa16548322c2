#!/usr/bin/env bash
# Idempotent setup shared by the two README commands.
# Creates or reuses .venv and installs lograft (editable) with the extras named
# in $LOGRAFT_EXTRAS. A stamp file keyed on the hash of the build inputs
# (pyproject.toml, setup.py, the C extension's source) makes a second run skip
# pip entirely, so it is fast.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${LOGRAFT_EXTRAS:-dev}"
PYTHON="${PYTHON:-python3}"

log() { printf '[setup] %s\n' "$*" >&2; }

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    log "Python 3.11 or newer is required; $PYTHON is $("$PYTHON" --version 2>&1)"
    exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtualenv in $VENV"
    "$PYTHON" -m venv "$VENV"
fi

STAMP="$VENV/.lograft-install-stamp"
# The C extension is compiled by the install (setup.py), and an editable
# install does not recompile it when its source changes: hash the source too.
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/lograft/storage/_recordscan.c" \
    | sha256sum | cut -d' ' -f1)-$EXTRAS"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
    log "installing lograft[$EXTRAS] into $VENV (first run takes a minute)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
    # pip's own output goes to a log: shown only when the install fails.
    if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
            -e "$ROOT[$EXTRAS]" >"$VENV/pip-install.log" 2>&1; then
        cat "$VENV/pip-install.log" >&2
        log "installing lograft failed; the full pip output is in $VENV/pip-install.log"
        exit 1
    fi
    echo "$WANT" > "$STAMP"
else
    log "virtualenv is up to date"
fi
