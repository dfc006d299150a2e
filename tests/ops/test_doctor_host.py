"""doctor's host checks where systemd runs: the clock and the unit, seen passing and failing.

systemd is not PID 1 in the test environment, so the commands doctor runs (``timedatectl``,
``systemctl``, ``systemd-analyze``) are stand-in scripts on ``PATH`` that print what the real
ones print (systemd 252's output), and the "systemd runs here" directory is a temporary one.
Where there is no systemd at all, test_doctor.py sees both checks skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from companyd.ops.doctor_host import check_clock, check_systemd

SECURITY = (
    "  NAME                         DESCRIPTION                              EXPOSURE\n"
    "✓ SystemCallFilter=~@swap     System call allow list defined for service\n"
    "→ Overall exposure level for companyd.service: {level} {word} {face}\n"
)


def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **outputs: str) -> Path:
    """Scripts named after the commands, printing ``outputs[name]``; a runtime directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in outputs.items():
        script = bin_dir / name.replace("_", "-")
        (tmp_path / f"{name}.out").write_text(text)
        script.write_text(f"#!/bin/sh\ncat {tmp_path / f'{name}.out'}\n")
        os.chmod(script, 0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    runtime = tmp_path / "run-systemd-system"
    runtime.mkdir()
    return runtime


def test_a_synchronised_clock_passes_and_an_unsynchronised_one_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = stand_ins(tmp_path, monkeypatch, timedatectl="yes\n")
    assert check_clock(runtime).status == "ok"
    (tmp_path / "timedatectl.out").write_text("no\n")
    c = check_clock(runtime)
    assert c.status == "warning" and "not synchronised" in c.summary
    assert c.fix and "timedatectl set-ntp true" in c.fix


def test_an_installed_enabled_hardened_unit_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = stand_ins(
        tmp_path,
        monkeypatch,
        systemctl="LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n",
        systemd_analyze=SECURITY.format(level="1.1", word="OK", face=":-)"),
    )
    c = check_systemd(runtime=runtime)
    assert c.status == "ok", c
    assert c.summary == "companyd.service active, enabled; exposure 1.1 OK"


def test_a_disabled_or_loosened_or_missing_unit_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = stand_ins(
        tmp_path,
        monkeypatch,
        systemctl="LoadState=loaded\nUnitFileState=disabled\nActiveState=inactive\n",
        systemd_analyze=SECURITY.format(level="1.1", word="OK", face=":-)"),
    )
    c = check_systemd(runtime=runtime)
    assert c.status == "warning" and "disabled" in c.summary
    assert c.fix and "systemctl enable companyd.service" in c.fix
    (tmp_path / "systemctl.out").write_text("LoadState=loaded\nUnitFileState=enabled\n")
    (tmp_path / "systemd_analyze.out").write_text(
        SECURITY.format(level="9.6", word="UNSAFE", face=":-{")
    )
    c = check_systemd(runtime=runtime)
    assert c.status == "warning" and "exposure 9.6 UNSAFE" in c.summary
    assert c.fix and "drop-ins" in c.fix
    (tmp_path / "systemctl.out").write_text("LoadState=not-found\n")
    c = check_systemd(runtime=runtime)
    assert c.status == "warning" and c.summary == "companyd.service is not installed"
    assert c.fix and "install-service" in c.fix


def test_systemd_running_without_its_tools_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert check_clock(runtime).summary == "skipped (no systemd): timedatectl is not installed"
    assert check_systemd(runtime=runtime).status == "skipped"
