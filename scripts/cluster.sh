#!/usr/bin/env bash
# The README's first command. Sets up (idempotently) and runs the main job.
#
#   scripts/cluster.sh start   set up, then run lograft locally
#   scripts/cluster.sh stop    stop what `start` started
#
# The three-node cluster arrives with the broker issue; until then `start`
# runs the storage-engine demo against a persistent log under data/demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cmd="${1:-start}"
case "$cmd" in
    start)
        LOGRAFT_EXTRAS=dev bash "$ROOT/scripts/setup.sh"
        exec "$ROOT/.venv/bin/python" "$ROOT/scripts/storage_demo.py" --data-dir "$ROOT/data/demo"
        ;;
    stop)
        echo "nothing is running: the storage demo exits when it is done"
        ;;
    *)
        echo "usage: scripts/cluster.sh start|stop" >&2
        exit 2
        ;;
esac
