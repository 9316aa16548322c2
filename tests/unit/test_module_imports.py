"""Every lograft module imports on its own, first.

An import cycle can hide in a full test run (some other module was imported
first and broke the cycle) and surface only when one test file, a script or a
user imports the module first. A child interpreter imports each module with
no lograft module loaded before it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lograft

_CHILD = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "lograft" or m.startswith("lograft.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _modules() -> list[str]:
    root = Path(lograft.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def test_every_module_imports_on_its_own() -> None:
    modules = _modules()
    assert "lograft.api.route_access" in modules
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *modules], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"modules that fail to import first:\n{done.stdout}{done.stderr}"
