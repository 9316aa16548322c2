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

# The toxiproxy server for the fault-injection tests, built from source with
# `go install` at a pinned version into .tools/bin (Go is on the machine; no
# prebuilt binary is downloaded). Skipped when the binary is already there.
TOXIPROXY_VERSION="v2.12.0"
TOOLS="$ROOT/.tools/bin"
TOXIPROXY="$TOOLS/toxiproxy-server-$TOXIPROXY_VERSION"
if [[ "${LOGRAFT_SKIP_TOXIPROXY:-}" != "1" && ! -x "$TOXIPROXY" ]]; then
    if command -v go >/dev/null 2>&1; then
        log "building toxiproxy server $TOXIPROXY_VERSION with go install (first run: a few minutes)"
        mkdir -p "$TOOLS"
        GOBIN="$TOOLS" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
            >"$TOOLS/go-install.log" 2>&1 || { cat "$TOOLS/go-install.log" >&2; exit 1; }
        mv "$TOOLS/server" "$TOXIPROXY"
        ln -sf "$(basename "$TOXIPROXY")" "$TOOLS/toxiproxy-server"
    else
        log "Go is not installed: the toxiproxy fault-injection tests will be skipped"
    fi
fi
