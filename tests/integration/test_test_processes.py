"""The node processes a test run starts do not outlive it (tests/process_leash.py).

A child pytest whose session fixture started a node gets SIGTERM: it must stop
as on Ctrl-C, running the finalizer that kills the node. A child process that
started a leashed node gets SIGKILL, which nothing can handle: the kernel's
parent-death signal must kill the node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.cluster_harness import eventually

ROOT = Path(__file__).resolve().parents[2]
# A child's Python start, a node's start and a teardown on a loaded 2-core machine.
DEADLINE_S = 60.0

# Started as the child pytest's only test, with the repository's
# tests/conftest.py as a plugin (what every run of the suite loads).
HELD_SESSION = """
import os
import signal
from pathlib import Path

import pytest

from tests.integration.cluster_harness import LograftCluster

OUT = Path({out!r})


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    cluster = LograftCluster(tmp_path_factory.mktemp("held"), 1)
    cluster.start(wait_ready=False)
    yield cluster
    # A second signal while tearing down changes nothing (and leaves the
    # signal handled, not ignored: a program started now would inherit SIG_IGN).
    os.kill(os.getpid(), signal.SIGTERM)
    handled = signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
    cluster.close()
    (OUT / "finalized").write_text("yes" if handled else "ignored")


def test_held(cluster):
    (OUT / "pids").write_text(" ".join(str(node.pid) for node in cluster))
    signal.pause()  # until the parent's SIGTERM
"""

# A plain process (no pytest, no finalizer) holding one leashed node.
HELD_PROCESS = """
import signal, sys
from pathlib import Path

from tests.integration.cluster_harness import LograftCluster

cluster = LograftCluster(Path(sys.argv[1]), 1)
cluster.start(wait_ready=False)
(Path(sys.argv[2]) / "pids").write_text(" ".join(str(node.pid) for node in cluster))
signal.pause()  # until the parent's SIGKILL
"""


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its new parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def held_pids(out: Path, child: subprocess.Popen[bytes]) -> list[int]:
    """The node pids the child wrote, once it has, each one checked alive."""

    def written() -> list[int]:
        assert child.poll() is None, f"the child exited with {child.returncode}"
        text = (out / "pids").read_text() if (out / "pids").exists() else ""
        return [int(p) for p in text.split()]

    pids = eventually(written, DEADLINE_S, "the child's node pids")
    assert all(alive(pid) for pid in pids), pids
    return pids


def stop_child(child: subprocess.Popen[bytes], pids: list[int]) -> None:
    """After a failed test: nothing of it stays."""
    if child.poll() is None:
        child.kill()
        child.wait(DEADLINE_S)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_pytest_stopped_by_a_signal_runs_the_finalizers_that_stop_its_nodes(tmp_path, sig):
    (tmp_path / "test_held.py").write_text(textwrap.dedent(HELD_SESSION.format(out=str(tmp_path))))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    child = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-p", "tests.conftest", "-c", str(tmp_path / "pytest.ini")),
            str(tmp_path / "test_held.py"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        pids = held_pids(tmp_path, child)
        child.send_signal(sig)
        output, _ = child.communicate(timeout=DEADLINE_S)
        # pytest's own exit after an interrupt (2), not death by the signal
        assert child.returncode == pytest.ExitCode.INTERRUPTED, output.decode()
        assert (tmp_path / "finalized").read_text() == "yes", output.decode()
        assert not any(alive(pid) for pid in pids), pids
    finally:
        stop_child(child, pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_leashed_node_dies_with_the_process_that_started_it(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", HELD_PROCESS, str(tmp_path / "cluster"), str(tmp_path)],
        cwd=ROOT,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        pids = held_pids(tmp_path, child)
        child.kill()
        child.wait(DEADLINE_S)
        eventually(lambda: not any(alive(pid) for pid in pids), DEADLINE_S, f"nodes {pids} to end")
    finally:
        stop_child(child, pids)
