"""`lograft.client` imports its parts on first use: a Spark executor reading a
range pulls in the fetcher and the transport, not the producer or the group
coordinator (every Spark Python worker paid ~1 s for those)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lograft.client


def test_every_exported_name_resolves():
    for name in lograft.client.__all__:
        assert getattr(lograft.client, name) is not None, name
    assert set(lograft.client.__all__) <= set(dir(lograft.client))


def test_unknown_name_is_an_attribute_error():
    try:
        lograft.client.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


@pytest.mark.parametrize(
    "module",
    [
        "lograft.pipelines.range_reader",  # an executor's read
        pytest.param("lograft.pipelines.datasource", id="planner"),  # the planner's
    ],
)
def test_a_read_leaves_producer_and_groups_unimported(module):
    if module.endswith("datasource"):
        pytest.importorskip("pyspark", reason="pyspark is not installed")
    code = (
        f"import sys, {module}; "
        "print(' '.join(m for m in ('lograft.client.producer', 'lograft.client.consumer', "
        "'lograft.client.consumer_group', 'lograft.client.coordinator') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""
