"""The processes a test starts (nodes, toxiproxy) never outlive the test process.

The harnesses start each node in a session of its own (a Ctrl-C to the
terminal's process group must not reach it) and stop it by pid in a fixture's
finalizer. Two things could skip that finalizer and leave nodes running,
holding their ports and data directories:

- SIGTERM or SIGHUP to pytest (a CI job cancelled, `timeout`, a closed
  terminal): their default action ends the process at once. `exit_on_signals`
  (installed for every test run by tests/conftest.py) makes the first one a
  KeyboardInterrupt, pytest's Ctrl-C path: the session stops and every
  fixture's finalizer runs, stopping its nodes by pid. Later ones are ignored
  while that teardown runs.
- SIGKILL to pytest (or a crash), which nothing in the process can handle:
  `leashed(argv)` starts the program under a parent-death signal (Linux
  `prctl(PR_SET_PDEATHSIG, SIGKILL)`, set by a tiny Python program that then
  execs the real one, same pid), so the kernel kills it when its parent dies.

The parent-death signal fires when the *thread* that started the process
ends, not the process: only a process started from the main thread (where
pytest runs fixtures and tests) is leashed; one started from another thread
relies on the finalizers alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

# The signals that end pytest by default and can be handled.
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# argv: [parent pid, program, args...]. The parent may have died between the
# fork and the prctl, in which case no signal would ever come: exit instead.
_LEASH = f"""\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
if os.getppid() != int(sys.argv[1]):
    sys.exit("the test process that started this one is gone")
os.execv(sys.argv[2], sys.argv[2:])
"""

_previous: dict[signal.Signals, object] = {}


def leashed(argv: Sequence[str]) -> list[str]:
    """`argv` (its program an absolute path) run so that it is SIGKILLed when
    this process dies; `argv` as it is off Linux or from another thread than
    the main one (see the module doc)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _LEASH, str(os.getpid()), *argv]


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    for sig in EXIT_SIGNALS:
        # The teardown runs to its end. A handler, not SIG_IGN: an ignored
        # signal stays ignored in every program the teardown would exec.
        signal.signal(sig, _during_teardown)
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping the test run")


def _during_teardown(_signum: int, _frame: FrameType | None) -> None:
    """A second SIGTERM or SIGHUP while the finalizers run: they go on."""


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP become a KeyboardInterrupt (once), so pytest stops and
    runs every finalizer (from the main thread only, where signals are handled)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in EXIT_SIGNALS:
        _previous.setdefault(sig, signal.getsignal(sig))
        signal.signal(sig, _interrupt)


def restore_signals() -> None:
    while _previous:
        sig, handler = _previous.popitem()
        signal.signal(sig, handler)  # type: ignore[arg-type]


def pytest_configure() -> None:
    exit_on_signals()


def pytest_unconfigure() -> None:
    restore_signals()
