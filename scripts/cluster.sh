#!/usr/bin/env bash
# The README's first command: set up (idempotently) and run a local
# three-node lograft cluster on 127.0.0.1.
#
#   scripts/cluster.sh start        set up, start three nodes, wait until ready
#   scripts/cluster.sh stop         stop them (data stays in data/cluster)
#   scripts/cluster.sh status       which nodes run, and the cluster view
#   scripts/cluster.sh kill N       SIGKILL node N (watch a failover)
#   scripts/cluster.sh restart N    start node N again
#   scripts/cluster.sh start --secure   the same with TLS, authentication and ACLs
#   scripts/cluster.sh token USER   print a bearer token for User:USER (secure cluster)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ "${1:-start}" == "start" ]]; then
    bash "$ROOT/scripts/setup.sh"
fi
if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    echo "run 'scripts/cluster.sh start' first (it sets up .venv)" >&2
    exit 1
fi
exec "$ROOT/.venv/bin/python" "$ROOT/scripts/local_cluster.py" "${@:-start}"
