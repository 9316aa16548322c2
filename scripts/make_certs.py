"""Make a local CA and node and client certificates for a TLS cluster.

    python scripts/make_certs.py --dir certs --nodes 3 --client admin

writes certs/ca.pem (+ ca-key.pem), certs/node-1.pem (+ node-1-key.pem), ...,
certs/admin.pem (+ admin-key.pem), and prints each path. An existing CA in the
directory is reused, so certificates made before stay trusted. For a cluster
on machines you control only: see lograft/security/local_ca.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lograft.security.local_ca import make_local_certificates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="where to write the PEM files")
    parser.add_argument("--nodes", type=int, default=3, help="node-1 .. node-N (default 3)")
    parser.add_argument(
        "--client", action="append", default=[], help="a client certificate's name (repeatable)"
    )
    parser.add_argument(
        "--host", action="append", default=[], help="an extra DNS name in node certificates"
    )
    parser.add_argument(
        "--ip", action="append", default=[], help="an extra IP address in node certificates"
    )
    args = parser.parse_args(argv)
    if args.nodes < 0:
        parser.error("--nodes must be >= 0")
    written = make_local_certificates(
        args.dir,
        nodes=[f"node-{i}" for i in range(1, args.nodes + 1)],
        clients=args.client,
        hosts=["localhost", *args.host],
        ips=["127.0.0.1", "::1", *args.ip],
    )
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
