"""The Java check before a JVM-backed session: versions parsed from real `java -version`
banners; a missing or too old Java raises JavaMissing naming what to install."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spark_sink.session import JavaMissing, check_java, parse_java_version


@pytest.mark.parametrize(
    ("banner", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("no version here", None),
    ],
)
def test_parse_java_version(banner: str, major: int | None) -> None:
    assert parse_java_version(banner) == major


def fake_java(home: Path, banner: str) -> None:
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "java"
    script.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_old_java_is_refused_with_what_to_install(tmp_path: Path, monkeypatch) -> None:
    fake_java(tmp_path, 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissing, match=r"Java 17 or newer, found Java 8.*JDK 17\+"):
        check_java()


def test_missing_java_names_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java anywhere
    with pytest.raises(JavaMissing, match=r"no `java` was found.*Spark Connect"):
        check_java()


def test_java_17_passes(tmp_path: Path, monkeypatch) -> None:
    fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert check_java() == 17
    assert os.environ["JAVA_HOME"] == str(tmp_path)
