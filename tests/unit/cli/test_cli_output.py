"""`cli.output`: every command that prints data takes `--output table|json`,
and tables are drawn by rich (a fixed-width recording console here)."""

from __future__ import annotations

import argparse
import io

from rich.console import Console

from lograft.cli.cluster import render_status
from lograft.cli.groups import render_describe as render_group
from lograft.cli.main import build_parser
from lograft.cli.output import PIPE_WIDTH, grid, print_rich, render_text
from lograft.cli.topics import render_describe as render_topic

# Commands that print no data of their own: `node` runs a node.
NO_DATA = {("node",)}


def leaf_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, parser)]
    found = []
    for name, child in subs[0].choices.items():
        found += leaf_parsers(child, (*path, name))
    return found


def test_every_command_that_prints_data_takes_output_json():
    leaves = dict(leaf_parsers(build_parser()))
    assert ("groups", "reset-offsets") in leaves and ("dump-log",) in leaves
    for path, parser in leaves.items():
        if path in NO_DATA:
            continue
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"--output", "-o"} <= options, path
        output = next(a for a in parser._actions if "--output" in a.option_strings)
        assert "json" in output.choices, path


def test_tables_render_aligned_at_a_fixed_width():
    table = grid(["A", "LONGER"], [(1, None), ("xyz", [1, 2]), (True, "x")])
    console = Console(width=30, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    assert [line.rstrip() for line in console.export_text().splitlines()] == [
        "A    LONGER",
        "1    -",
        "xyz  1,2",
        "yes  x",
    ]


def test_topic_describe_renders_with_status():
    doc = {
        "name": "orders",
        "topic_id": "id-1",
        "configs": {"min_insync_replicas": "2"},
        "partitions": [
            {"partition": 1, "leader": -1, "replicas": [1, 2], "isr": [], "leader_epoch": 3},
            {
                "partition": 0,
                "leader": 1,
                "replicas": [1, 2],
                "isr": [1],
                "leader_epoch": 2,
                "log_start_offset": 0,
                "log_end_offset": 10,
                "high_watermark": 10,
            },
        ],
    }
    lines = render_text(render_topic(doc), width=120).splitlines()
    assert lines[0] == "topic orders  id id-1  partitions 2  replication factor 2"
    assert lines[1] == "configs: min_insync_replicas=2"
    assert lines[3].split() == [
        "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LOG-START", "LOG-END", "HW", "STATUS"
    ]  # fmt: skip
    assert lines[4].split() == ["0", "1", "2", "1,2", "1", "0", "10", "10", "under-replicated"]
    assert lines[5].split() == ["1", "none", "3", "1,2", "-", "-", "-", "-", "offline"]


def test_group_describe_renders_both_tables():
    doc = {
        "group_id": "g",
        "state": "stable",
        "members": [{"member_id": "m1", "client_id": "c1", "assigned": {"t": [0]}}],
        "offsets": [{"topic": "t", "partition": 0, "committed_offset": 5, "lag": 2, "owner": "m1"}],
    }
    text = render_text(render_group(doc, "http://n:1"), width=160)
    assert "coordinator http://n:1  members 1  total lag 2" in text
    assert ["t", "0", "5", "-", "2", "m1", "c1"] in [line.split() for line in text.splitlines()]
    assert any(line.split()[:2] == ["m1", "c1"] and "t:0" in line for line in text.splitlines())


def test_status_renders_indented_tables():
    doc = {
        "cluster_id": "c",
        "node_id": 1,
        "raft": {"role": "leader", "voters": [{"node_id": "1", "is_self": True}]},
        "brokers": [{"id": 1, "state": "unfenced", "endpoints": {"http": "http://h:1"}}],
    }
    text = render_text(render_status(doc), width=100)
    assert "cluster id         c" in text
    assert "\n  ID  SELF  CONNECTED  MATCH-INDEX\n  1   yes   -          -" in text


def test_a_pipe_gets_plain_unwrapped_lines_without_trailing_spaces():
    out = io.StringIO()
    wide = "x" * 300
    print_rich([grid(["NAME", "CONFIGS"], [("a", wide), ("bb", "-")])], out)
    assert out.getvalue() == f"NAME  CONFIGS\na     {wide}\nbb    -\n"
    assert "\x1b" not in out.getvalue() and PIPE_WIDTH > 300
