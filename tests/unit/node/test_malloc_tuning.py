"""node/malloc_tuning.py: the node's malloc thresholds, and an operator's own
settings left alone."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from lograft.node import malloc_tuning
from lograft.node.malloc_tuning import operator_tuned, tune_malloc


@pytest.mark.parametrize(
    ("environ", "tuned"),
    [
        ({}, False),
        ({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"}, False),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, True),
    ],
)
def test_an_operators_malloc_settings_are_recognised(environ, tuned) -> None:
    assert operator_tuned(environ) is tuned


def test_an_operators_settings_win(monkeypatch) -> None:
    def no_call(*_args: object) -> int:
        raise AssertionError("mallopt was called")

    monkeypatch.setattr(malloc_tuning.ctypes, "CDLL", no_call)
    assert tune_malloc({"MALLOC_TRIM_THRESHOLD_": "0"}) is False


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch) -> None:
    class NoMallopt:
        def __init__(self, _name: object) -> None:
            pass

    monkeypatch.setattr(malloc_tuning.ctypes, "CDLL", NoMallopt)
    assert tune_malloc({}) is False


def test_a_refused_threshold_is_reported(monkeypatch) -> None:
    class Refusing:
        def __init__(self, _name: object) -> None:
            self.mallopt = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)(
                lambda _param, _value: 0
            )

    monkeypatch.setattr(malloc_tuning.ctypes, "CDLL", Refusing)
    assert tune_malloc({}) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_takes_the_thresholds_in_a_fresh_process() -> None:
    # In a child: the thresholds are process-wide and would outlive the test.
    code = "from lograft.node.malloc_tuning import tune_malloc; print(tune_malloc({}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    libc = ctypes.CDLL(None)
    assert out.stdout.strip() == str(hasattr(libc, "mallopt") and _is_glibc())


def _is_glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018 (glibc has it, musl not)
    except AttributeError:
        return False
    return True
