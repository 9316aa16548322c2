"""Every LOGRAFT_ variable the code, deployment files and docs name is one that is read.

Node settings are overridden only by `LOGRAFT_CFG_...` variables; anything
else under `LOGRAFT_` is ignored by a node. A message or a doc that still told
people to set the old spelling (`LOGRAFT_CLUSTER_SECRET`) would send them to a
variable that changes nothing, so the names outside the prefix are listed here.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Variables that are not node settings, each read by the named place.
NOT_SETTINGS = {
    "LOGRAFT_BOOTSTRAP",  # lograft.cli: default --bootstrap
    "LOGRAFT_TOKEN",  # lograft.cli: a bearer token when no --token/--token-file/--user
    "LOGRAFT_PASSWORD",  # lograft.cli: the password of --user
    "LOGRAFT_EXTRAS",  # scripts/setup.sh: extra pip extras
    "LOGRAFT_SRC",  # container builds: where the source is
    "LOGRAFT_REQUIRE_JAVA",  # scripts/setup.sh / tests: Java must be found
    "LOGRAFT_REQUIRE_C_EXTENSION",  # scripts/test.sh: the C scanner must be built
    "LOGRAFT_FUZZ_STATEFUL",  # tests/integration/test_openapi_fuzz.py
    "LOGRAFT_FUZZ_EXAMPLES",
    "LOGRAFT_FUZZ_STATEFUL_BUDGET_S",
    "LOGRAFT_SKIP_TOXIPROXY",  # scripts/setup.sh: do not build toxiproxy
    "LOGRAFT_SKIP_PROMTOOL",  # scripts/setup.sh: do not install promtool
    "LOGRAFT_REQUIRE_BROWSER",  # scripts/setup.sh / tests: Chromium must be found
    "LOGRAFT_CONSOLE_SCREENSHOTS",  # tests/integration/test_console_browser.py: where to save
    "LOGRAFT_TEST_POWER_LOSS_DIR",  # lograft/power_loss.py: tests' power-loss mode
    "LOGRAFT_TLS_PROBE_DIR",  # scripts/tls_probe: where bench_tls_cost.py's probe writes
}

# The one place that names an old spelling on purpose: the test that it is ignored.
ALLOWED_FILES = {"tests/unit/node/test_node_config.py", "tests/unit/node/test_env_names.py"}


def test_every_named_variable_is_a_setting_override_or_a_known_switch():
    listed = subprocess.run(
        ["git", "grep", "-nE", r"LOGRAFT_[A-Z0-9_]+", "--", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    unknown = []
    for line in listed.splitlines():
        path = line.split(":", 1)[0]
        if path in ALLOWED_FILES:
            continue
        for name in re.findall(r"LOGRAFT_[A-Z0-9_]+", line):
            if name.startswith("LOGRAFT_CFG_") or name in NOT_SETTINGS:
                continue
            unknown.append(f"{line[:120]} ({name})")
    assert not unknown, "\n".join(unknown)
