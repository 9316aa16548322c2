"""What every test run keeps: the processes tests start never outlive it
(tests/process_leash.py: SIGTERM and SIGHUP to pytest run the finalizers that
stop them)."""

from __future__ import annotations

from tests.process_leash import pytest_configure, pytest_unconfigure

__all__ = ["pytest_configure", "pytest_unconfigure"]
