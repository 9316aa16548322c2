"""scripts/check_native.py: the test command's refusal of a missing or stale C scanner."""

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from lograft.protocol import record_columns, record_scan

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check_native.py"


@pytest.fixture(scope="module")
def check_native() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_native", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake(name: str, implementation: str, **abis: int) -> SimpleNamespace:
    return SimpleNamespace(__name__=name, IMPLEMENTATION=implementation, **abis)


SCAN_C = fake("record_scan", "c", C_ABI=record_scan.C_ABI)
COLUMNS_C = fake("record_columns", "c", C_COLUMNS_ABI=record_columns.C_COLUMNS_ABI)
CURRENT = SimpleNamespace(ABI=record_scan.C_ABI, COLUMNS_ABI=record_columns.C_COLUMNS_ABI)


def test_a_current_build_passes(check_native):
    assert check_native.problems(CURRENT, SCAN_C, COLUMNS_C) == []


def test_no_build_fails(check_native):
    scan_py = fake("record_scan", "python", C_ABI=record_scan.C_ABI)
    columns_py = fake("record_columns", "python", C_COLUMNS_ABI=record_columns.C_COLUMNS_ABI)
    (line,) = check_native.problems(None, scan_py, columns_py)
    assert "not built" in line and "scripts/setup.sh" in line


def test_a_stale_scan_abi_fails(check_native):
    stale = SimpleNamespace(ABI=record_scan.C_ABI - 1, COLUMNS_ABI=record_columns.C_COLUMNS_ABI)
    (line,) = check_native.problems(stale, SCAN_C, COLUMNS_C)
    assert "stale build" in line and f"ABI {record_scan.C_ABI - 1}" in line


def test_a_build_without_the_column_decoder_fails(check_native):
    old = SimpleNamespace(ABI=record_scan.C_ABI)  # built before decode_columns
    (line,) = check_native.problems(old, SCAN_C, COLUMNS_C)
    assert "COLUMNS_ABI 0" in line


def test_a_module_that_fell_back_anyway_fails(check_native):
    scan_py = fake("record_scan", "python", C_ABI=record_scan.C_ABI)
    (line,) = check_native.problems(CURRENT, scan_py, COLUMNS_C)
    assert "record_scan.IMPLEMENTATION is 'python'" in line


def test_the_script_fails_without_the_extension(tmp_path):
    """End to end: a process in which the extension cannot import exits 1."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'lograft.protocol._recordscan':\n"
        "            raise ImportError('blocked by the test')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1, out
    assert "not built" in out.stderr


def test_the_script_passes_here_when_the_extension_is_required():
    if record_scan.IMPLEMENTATION != "c":
        pytest.skip("the C extension is not built in this checkout")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    assert "C record scanner in use" in out.stdout


def test_the_encoder_check(check_native):
    from lograft.protocol import batch, open_batch, partitioner

    good = SimpleNamespace(
        ABI=batch.C_ENCODE_ABI, OpenBatch=open_batch.OpenBatch, murmur2=partitioner.murmur2
    )
    batch_c = fake("lograft.protocol.batch", "c", C_ENCODE_ABI=batch.C_ENCODE_ABI)
    batch_c.ENCODE_IMPLEMENTATION = "c"
    assert check_native.encoder_problems(good, batch_c) == []
    (line,) = check_native.encoder_problems(None, batch_c)
    assert "_recordencode is not built" in line
    stale = SimpleNamespace(ABI=batch.C_ENCODE_ABI + 1)
    (line,) = check_native.encoder_problems(stale, batch_c)
    assert "stale build" in line
    batch_py = fake("lograft.protocol.batch", "python", C_ENCODE_ABI=batch.C_ENCODE_ABI)
    batch_py.ENCODE_IMPLEMENTATION = "python"
    (line,) = check_native.encoder_problems(good, batch_py)
    assert "ENCODE_IMPLEMENTATION" in line
    other = SimpleNamespace(ABI=batch.C_ENCODE_ABI, OpenBatch=object, murmur2=len)
    lines = check_native.encoder_problems(other, batch_c)
    assert len(lines) == 2 and "OpenBatch" in lines[0] and "murmur2" in lines[1]


def test_the_decoder_check(check_native):
    from lograft.protocol import record_decode

    good = SimpleNamespace(RECORDS_ABI=record_decode.C_RECORDS_ABI)
    decode_c = fake("record_decode", "c", C_RECORDS_ABI=record_decode.C_RECORDS_ABI)
    assert check_native.decoder_problems(good, decode_c) == []
    assert check_native.decoder_problems(None, decode_c) == []  # problems() reports that
    (line,) = check_native.decoder_problems(SimpleNamespace(), decode_c)
    assert "RECORDS_ABI 0" in line and "stale build" in line
    decode_py = fake("record_decode", "python", C_RECORDS_ABI=record_decode.C_RECORDS_ABI)
    (line,) = check_native.decoder_problems(good, decode_py)
    assert "IMPLEMENTATION" in line


def test_the_column_encoder_check(check_native):
    from lograft.protocol import plain_batch

    good = SimpleNamespace(ABI=plain_batch.C_COLUMNS_ENCODE_ABI)
    plain_c = fake(
        "lograft.protocol.plain_batch", "c", C_COLUMNS_ENCODE_ABI=plain_batch.C_COLUMNS_ENCODE_ABI
    )
    assert check_native.column_encoder_problems(good, plain_c) == []
    (line,) = check_native.column_encoder_problems(None, plain_c)
    assert "_columnencode is not built" in line
    stale = SimpleNamespace(ABI=plain_batch.C_COLUMNS_ENCODE_ABI + 1)
    (line,) = check_native.column_encoder_problems(stale, plain_c)
    assert "stale build" in line
    plain_py = fake(
        "lograft.protocol.plain_batch",
        "python",
        C_COLUMNS_ENCODE_ABI=plain_batch.C_COLUMNS_ENCODE_ABI,
    )
    (line,) = check_native.column_encoder_problems(good, plain_py)
    assert "IMPLEMENTATION is 'python'" in line
