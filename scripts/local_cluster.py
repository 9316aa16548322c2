"""Run a local three-node lograft cluster on 127.0.0.1 (what scripts/cluster.sh calls).

    start           write configs (first time), start the nodes that are not running,
                    wait until every node is ready, print curl commands to try
    start --secure  the same with TLS, authentication and ACLs on (below)
    stop            SIGTERM every node (controlled shutdown), SIGKILL after a grace period
    status          which nodes run, and the cluster view
    kill N          SIGKILL node N (to watch a failover)
    restart N       start node N again with its data
    token USER      print a bearer token for User:USER from the secure cluster's
                    local issuer (--lifetime-s, default 24 h)

Data, configs, logs and pid files live under data/cluster/ (or --dir); starting
again keeps the data. Ports: HTTP 9091-9093, Raft 19091-19093, the controller
listeners (controller calls, served off each node's main loop) 19191-19193
(--base-port moves all three).

`--secure` uses data/cluster-secure/ instead (stop, status, kill and restart
find whichever of the two runs; token uses the secure one). Made once, kept:
tls/ (a local CA and node certificates from lograft/security/local_ca.py, plus
an `admin` client certificate), issuer/ (a local token issuer's EC key and its
JWKS, lograft/security/dev_tokens.py); on every start, admin.token (a bearer
token for User:admin, valid 24 h). The nodes serve https only and take bearer
tokens, passwords and client certificates; ACLs are on with User:admin as the
super user. For a cluster on your own machine only: whoever reads these files
is admin.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from lograft.security.dev_tokens import DEV_AUDIENCE, DEV_ISSUER, DevIssuer
from lograft.security.local_ca import make_local_certificates

NODES = (1, 2, 3)
READY_TIMEOUT_S = 90
STOP_GRACE_S = 20
PLAIN_DIR = "data/cluster"
SECURE_DIR = "data/cluster-secure"
ADMIN = "admin"
# [tls] principal_mapping_rules: local_ca's client certificates by their CN.
CLIENT_MAPPING = "RULE:^CN=([^,]+),OU=clients,O=lograft$/$1/,DEFAULT"
# Lifetime of the admin token written at each secure start, seconds.
ADMIN_TOKEN_LIFETIME_S = 24 * 3600


def http_port(base: int, node: int) -> int:
    return base + node


def raft_port(base: int, node: int) -> int:
    return base + 10_000 + node


def controller_port(base: int, node: int) -> int:
    return base + 10_100 + node


def write_configs(directory: Path, base: int, secure: bool = False) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    security = secure_sections(directory) if secure else ""
    secret_file = directory / "cluster-secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_hex(16))
        secret_file.chmod(0o600)
    secret = secret_file.read_text().strip()
    voters = "".join(
        f'\n[[voters]]\nid = {n}\nraft = "127.0.0.1:{raft_port(base, n)}"\n'
        f'http = "127.0.0.1:{http_port(base, n)}"\n'
        f'controller = "127.0.0.1:{controller_port(base, n)}"\n'
        for n in NODES
    )
    for n in NODES:
        path = directory / f"node-{n}.toml"
        if path.exists():
            continue
        path.write_text(
            f"# lograft node {n} of the local cluster (written by scripts/cluster.sh)\n"
            f"node_id = {n}\n"
            'roles = ["controller", "broker"]\n'
            f'data_dir = "{directory / f"node-{n}"}"\n'
            'cluster_id = "lograft-local"\n'
            "# Authenticates the internal endpoints; the Raft password is derived from it.\n"
            f'cluster_secret = "{secret}"\n'
            f'\n[http]\nhost = "127.0.0.1"\nport = {http_port(base, n)}\n'
            f"{voters}"
            "\n[broker]\n"
            "# A follower that has not caught up for 10 s leaves the ISR.\n"
            "replica_lag_time_max_ms = 10000\n"
            f"{security.replace('NODE', f'node-{n}')}"
        )


def secure_sections(directory: Path) -> str:
    """[tls] and [security] of a node of the secure cluster ("NODE" stands for
    its certificate's name)."""
    tls, issuer = directory / "tls", directory / "issuer"
    return (
        "\n# https only; node-to-node calls verify each other against the local CA.\n"
        "[tls]\n"
        f'certificate_file = "{tls}/NODE.pem"\n'
        f'key_file = "{tls}/NODE-key.pem"\n'
        f'ca_file = "{tls}/ca.pem"\n'
        '# A client may show a certificate (the "certificate" way in), need not.\n'
        'client_certificate = "optional"\n'
        "# The admin certificate (CN=admin,OU=clients) is User:admin, the super user.\n"
        f'principal_mapping_rules = "{CLIENT_MAPPING}"\n'
        "\n[security]\n"
        'authentication = ["bearer", "password", "certificate"]\n'
        "authorization = true\n"
        f'super_users = ["User:{ADMIN}"]\n'
        "\n# Tokens from the local issuer (scripts/cluster.sh token USER).\n"
        "[security.bearer]\n"
        f'issuer = "{DEV_ISSUER}"\n'
        f'audience = "{DEV_AUDIENCE}"\n'
        f'jwks_file = "{issuer}/jwks.json"\n'
    )


def make_secure_files(directory: Path) -> Path:
    """The local CA, node and admin certificates (once), the token issuer
    (once) and a fresh admin token; returns the admin token's file."""
    tls = directory / "tls"
    names = [f"node-{n}" for n in NODES] + [ADMIN]
    if not all((tls / f"{name}.pem").exists() for name in ["ca", *names]):
        make_local_certificates(tls, nodes=names[:-1], clients=[ADMIN])
        print(f"made a local CA and certificates in {tls}")
    token_file = directory / f"{ADMIN}.token"
    write_secret(token_file, mint(directory, ADMIN, ADMIN_TOKEN_LIFETIME_S))
    return token_file


def mint(directory: Path, user: str, lifetime_s: int) -> str:
    return DevIssuer.create_or_load(directory / "issuer").mint(user, lifetime_s=lifetime_s)


def write_secret(path: Path, text: str) -> None:
    # Written to a new file renamed over the old: a reader never sees half a token.
    fresh = path.with_name(path.name + ".new")
    descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text + "\n")
    os.replace(fresh, path)


def tls_context(directory: Path) -> ssl.SSLContext | None:
    """What the script's own https requests trust (None: a plain cluster)."""
    ca = directory / "tls" / "ca.pem"
    return ssl.create_default_context(cafile=ca) if is_secure(directory) else None


def is_secure(directory: Path) -> bool:
    return (directory / "tls" / "ca.pem").exists()


def scheme(directory: Path) -> str:
    return "https" if is_secure(directory) else "http"


def pid_of(directory: Path, n: int) -> int | None:
    try:
        pid = int((directory / f"node-{n}.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    # Make sure the pid is still our node, not a reused number.
    try:
        cmdline, state = proc_cmdline(pid), proc_state(pid)
    except (FileNotFoundError, IndexError):
        return None
    if state == "Z":
        return None  # exited, not yet reaped
    if not cmdline:
        # For a moment after the exec the kernel shows no command line (the
        # interpreter named by the `lograft` script's shebang is loading): a
        # node just started, which reading it as "exited" made `start` fail.
        return pid
    return pid if f"node-{n}.toml".encode() in cmdline else None


def proc_cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")


def proc_state(pid: int) -> str:
    """R, S, Z, ... from /proc/PID/stat (the field after the command name)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def start_node(directory: Path, n: int) -> None:
    if pid_of(directory, n) is not None:
        print(f"node {n} is already running")
        return
    exe = Path(sys.executable).parent / "lograft"
    log = (directory / f"node-{n}.log").open("ab")
    proc = subprocess.Popen(
        [str(exe), "node", "--config", str(directory / f"node-{n}.toml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    (directory / f"node-{n}.pid").write_text(str(proc.pid))
    print(f"started node {n} (pid {proc.pid}), log {directory / f'node-{n}.log'}")


def get_json(
    url: str,
    timeout: float = 2.0,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
) -> dict:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")


def wait_ready(directory: Path, base: int, nodes: tuple[int, ...]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(nodes)
    context, web = tls_context(directory), scheme(directory)
    while pending and time.monotonic() < deadline:
        for n in sorted(pending):
            if pid_of(directory, n) is None:
                print(f"\nnode {n} exited; last lines of its log:", file=sys.stderr)
                tail(directory / f"node-{n}.log")
                return False
            try:
                url = f"{web}://127.0.0.1:{http_port(base, n)}/readyz"
                if get_json(url, context=context).get("ready"):
                    pending.discard(n)
            except (OSError, ValueError):
                pass
        print(
            f"\rwaiting for nodes to be ready: {len(nodes) - len(pending)}/{len(nodes)}",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if pending:
            time.sleep(0.25)  # polling readiness with a deadline
    print(file=sys.stderr)
    if pending:
        for n in sorted(pending):
            print(
                f"node {n} is not ready after {READY_TIMEOUT_S} s; its log ends:", file=sys.stderr
            )
            tail(directory / f"node-{n}.log")
        return False
    return True


def tail(path: Path, lines: int = 15) -> None:
    try:
        for line in path.read_text(errors="replace").splitlines()[-lines:]:
            print(f"  {line}", file=sys.stderr)
    except FileNotFoundError:
        print("  (no log)", file=sys.stderr)


def stop(directory: Path) -> None:
    pids = {n: pid_of(directory, n) for n in NODES}
    for n, pid in pids.items():
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            print(f"stopping node {n} (pid {pid})")
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(pid_of(directory, n) for n in NODES):
        time.sleep(0.1)  # polling process exit with a deadline
    for n in NODES:
        pid = pid_of(directory, n)
        if pid is not None:
            print(f"node {n} did not stop in {STOP_GRACE_S} s; killing it")
            os.kill(pid, signal.SIGKILL)
    for n in NODES:
        (directory / f"node-{n}.pid").unlink(missing_ok=True)
    print("stopped")


def show_status(directory: Path, base: int) -> None:
    for n in NODES:
        pid = pid_of(directory, n)
        print(f"node {n}: {'running, pid ' + str(pid) if pid else 'not running'}")
    headers = {}
    token_file = directory / f"{ADMIN}.token"
    if is_secure(directory) and token_file.exists():
        headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
    for n in NODES:
        try:
            view = get_json(
                f"{scheme(directory)}://127.0.0.1:{http_port(base, n)}/v1/cluster",
                context=tls_context(directory),
                headers=headers,
            )
        except OSError:
            continue
        print(json.dumps(view, indent=2))
        return


def print_examples(base: int) -> None:
    a, b, c = (f"http://127.0.0.1:{http_port(base, n)}" for n in NODES)
    print(f"""
lograft is running: three nodes (controller + broker each) at {a}, {b}, {c}

Try:
  # create a topic with 3 partitions, each replicated on all 3 brokers
  curl -s -XPOST {a}/v1/topics -H 'content-type: application/json' \\
       -d '{{"name": "orders", "partitions": 3, "replication_factor": 3}}'

  # produce JSON records with keys (any node routes them to the partition leaders)
  curl -s -XPOST {b}/v1/topics/orders/records -H 'content-type: application/json' \\
       -d '{{"records": [{{"key": "alice", "value": {{"item": "book", "qty": 1}}}},
                        {{"key": "bob",   "value": {{"item": "pen",  "qty": 3}}}}]}}'

  # see where they went: leader, replicas, in-sync replicas, offsets per partition
  curl -s {a}/v1/topics/orders

  # fetch partition 0 from its leader (a non-leader answers 421 with the leader's URL)
  curl -s '{a}/v1/topics/orders/partitions/0/records?offset=0'

  # tail every partition live from any node (Server-Sent Events; Ctrl-C to stop)
  curl -N '{c}/v1/topics/orders/stream?offset=earliest'

  # cluster view: active controller, Raft term, brokers
  curl -s {c}/v1/cluster

  scripts/cluster.sh kill 1      # SIGKILL node 1 and watch the leaders move
  scripts/cluster.sh restart 1   # bring it back; it catches up and rejoins
  scripts/cluster.sh stop        # stop all three (data stays in data/cluster)
""")


def print_secure_examples(base: int, directory: Path, token_file: Path) -> None:
    a, b, c = (f"https://127.0.0.1:{http_port(base, n)}" for n in NODES)
    tls = directory / "tls"
    dir_option = "" if directory == Path(SECURE_DIR).resolve() else f" --dir {directory}"
    print(f"""
lograft is running with TLS, authentication and ACLs: three nodes at {a}, {b}, {c}
The CA is {tls}/ca.pem; {token_file} holds a bearer token for User:admin (the
super user, valid 24 h; a new one at every start).

Try:
  CA={tls}/ca.pem
  ADMIN="Authorization: Bearer $(cat {token_file})"

  # no credentials: 401 SASL_AUTHENTICATION_FAILED
  curl -s --cacert $CA {a}/v1/topics

  # as admin: create a topic and list topics
  curl -s --cacert $CA -H "$ADMIN" -XPOST {a}/v1/topics -H 'content-type: application/json' \\
       -d '{{"name": "orders", "partitions": 3, "replication_factor": 3}}'
  curl -s --cacert $CA -H "$ADMIN" {a}/v1/topics

  # produce and fetch as admin
  curl -s --cacert $CA -H "$ADMIN" -XPOST {b}/v1/topics/orders/records \\
       -H 'content-type: application/json' -d '{{"records": [{{"key": "alice", "value": "hi"}}]}}'
  curl -s --cacert $CA -H "$ADMIN" '{a}/v1/topics/orders/partitions/0/records?offset=0'

  # the admin client certificate works too (no Authorization header)
  curl -s --cacert $CA --cert {tls}/admin.pem --key {tls}/admin-key.pem {c}/v1/cluster

  # another user: a token for User:alice, who may do nothing until an ACL allows it
  ALICE="Authorization: Bearer $(scripts/cluster.sh token alice{dir_option})"
  curl -s --cacert $CA -H "$ALICE" {a}/v1/topics            # orders is not listed
  curl -s --cacert $CA -H "$ADMIN" -XPOST {a}/v1/acls -H 'content-type: application/json' \\
       -d '{{"acls": [{{"principal": "User:alice", "host": "*", "resource_type": "topic",
                       "resource_name": "orders", "pattern_type": "literal",
                       "operation": "read", "permission": "allow"}}]}}'
  curl -s --cacert $CA -H "$ALICE" {a}/v1/topics            # now it is

  # the command line takes the same: --cacert, --token-file (or --token, --user, --cert/--key)
  .venv/bin/lograft topics list --bootstrap {a} --cacert $CA --token-file {token_file}

  scripts/cluster.sh stop        # stop all three (data stays in {directory})
""")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["start", "stop", "status", "kill", "restart", "token"])
    parser.add_argument("node", nargs="?", help="a node number (kill, restart); a user (token)")
    parser.add_argument(
        "--dir", default=None, help=f"cluster directory (default {PLAIN_DIR}, {SECURE_DIR})"
    )
    parser.add_argument(
        "--secure", action="store_true", help="TLS, authentication and ACLs on (start)"
    )
    parser.add_argument(
        "--lifetime-s",
        type=int,
        default=ADMIN_TOKEN_LIFETIME_S,
        help="a token's lifetime, seconds (token; default 24 h)",
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=9090,
        help="HTTP ports base+1..3, Raft base+10001..3, controller listeners base+10101..3",
    )
    args = parser.parse_args()
    directory = cluster_dir(args)
    base = args.base_port
    if args.command == "token":
        if not args.node:
            parser.error("token needs a user name: scripts/cluster.sh token alice")
        if not (directory / "issuer" / "issuer-key.pem").exists():
            print(f"no token issuer in {directory}: run 'scripts/cluster.sh start --secure' first")
            return 1
        print(mint(directory, args.node, args.lifetime_s))
        return 0
    if args.command in ("kill", "restart"):
        if args.node not in [str(n) for n in NODES]:
            parser.error(f"{args.command} needs a node number (1, 2 or 3)")
        args.node = int(args.node)
    if args.command == "start":
        secure = args.secure or is_secure(directory)
        token_file = make_secure_files(directory) if secure else None
        write_configs(directory, base, secure)
        for n in NODES:
            start_node(directory, n)
        if not wait_ready(directory, base, NODES):
            return 1
        if token_file is not None:
            print_secure_examples(base, directory, token_file)
        else:
            print_examples(base)
    elif args.command == "stop":
        stop(directory)
    elif args.command == "status":
        show_status(directory, base)
    elif args.command == "kill":
        pid = pid_of(directory, args.node)
        if pid is None:
            print(f"node {args.node} is not running")
            return 1
        os.kill(pid, signal.SIGKILL)
        print(f"killed node {args.node} (pid {pid}) with SIGKILL")
    elif args.command == "restart":
        start_node(directory, args.node)
        if not wait_ready(directory, base, (args.node,)):
            return 1
        print(f"node {args.node} is ready")
    return 0


def cluster_dir(args: argparse.Namespace) -> Path:
    """--dir; else the secure directory for --secure and token; else the one
    whose nodes run (secure first), else the plain one."""
    if args.dir is not None:
        return Path(args.dir).resolve()
    plain, secure = Path(PLAIN_DIR).resolve(), Path(SECURE_DIR).resolve()
    if args.secure or args.command == "token":
        return secure
    if args.command != "start" and any(pid_of(secure, n) for n in NODES):
        return secure
    return plain


if __name__ == "__main__":
    sys.exit(main())
