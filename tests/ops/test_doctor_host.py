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

from agentkit import write_company
from companyd.config import CompanyConfig, load_config
from companyd.ops._doctor import check_tool_sandbox
from companyd.ops._doctor_host import (
    check_clock,
    check_disk,
    check_systemd,
    check_systemd_units,
    unit_forbids_niceness,
    unit_forbids_sandbox,
    unit_runs_as_root,
)

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


def systemd_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, units: dict[str, str], level: str = "1.1"
) -> Path:
    """Stand-ins for a host with ``units`` (name → ``systemctl show`` output): ``systemctl
    list-units`` prints the loaded instances as systemd 252 does, ``systemctl show UNIT`` that
    unit's properties (``LoadState=not-found`` for any other), ``systemd-analyze security
    UNIT`` an exposure of ``level`` for it.
    """
    runtime = stand_ins(tmp_path, monkeypatch, timedatectl="yes\n")
    for name, props in units.items():
        (tmp_path / f"show-{name}").write_text(props)
    listing = "".join(
        f"{name} loaded active running companyd {name[9:-8]}\n"
        for name in units
        if name.startswith("companyd@")
    )
    (tmp_path / "list-units.out").write_text(listing)
    bin_dir = tmp_path / "bin"
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = list-units ]; then cat {tmp_path}/list-units.out; exit 0; fi\n'
        f'if [ -f "{tmp_path}/show-$2" ]; then cat "{tmp_path}/show-$2";'
        " else echo LoadState=not-found; fi\n"
    )
    (bin_dir / "systemd-analyze").write_text(
        f'#!/bin/sh\necho "→ Overall exposure level for $2: {level} OK :-)"\n'
    )
    for script in ("systemctl", "systemd-analyze"):
        os.chmod(bin_dir / script, 0o755)
    return runtime


ENABLED = "LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n"


def test_each_instance_is_checked_like_the_single_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = systemd_host(
        tmp_path,
        monkeypatch,
        {
            "companyd@acme.service": ENABLED,
            "companyd@bakery.service": "LoadState=loaded\nUnitFileState=disabled\n"
            "ActiveState=failed\n",
        },
    )
    checks = check_systemd_units(runtime)
    # no companyd.service on a host of instances: not a warning
    assert [(c.name, c.status, c.summary) for c in checks] == [
        ("systemd", "ok", "companyd@acme.service active, enabled; exposure 1.1 OK"),
        ("systemd", "warning", "companyd@bakery.service failed, disabled; exposure 1.1 OK"),
    ]
    assert checks[1].fix == "sudo systemctl enable companyd@bakery.service (so it starts at boot)"
    # a loosened instance is compared with the template it came from
    (tmp_path / "bin" / "systemd-analyze").write_text(
        '#!/bin/sh\necho "→ Overall exposure level for $2: 9.6 UNSAFE :-{"\n'
    )
    loose = check_systemd_units(runtime)[0]
    assert loose.status == "warning" and "exposure 9.6 UNSAFE" in loose.summary
    assert loose.fix and "systemd/companyd@.service" in loose.fix


def test_the_single_unit_running_next_to_instances_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = systemd_host(
        tmp_path,
        monkeypatch,
        {"companyd.service": ENABLED, "companyd@acme.service": ENABLED},
    )
    first, *rest = check_systemd_units(runtime)
    assert first.status == "warning"
    assert first.summary == (
        "companyd.service active, enabled; exposure 1.1 OK; and 1 companyd@ instance(s) on "
        "the same host"
    )
    assert first.fix and "share /var/lib/companyd and /run/companyd" in first.fix
    assert [c.summary for c in rest] == ["companyd@acme.service active, enabled; exposure 1.1 OK"]


def test_without_instances_only_the_single_unit_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = systemd_host(tmp_path, monkeypatch, {})
    [only] = check_systemd_units(runtime)
    assert only.status == "warning" and only.summary == "companyd.service is not installed"
    assert check_systemd_units(tmp_path / "absent")[0].status == "skipped"


# -- the unit's hardening against the tool servers' sandbox ------------------------------------

#: ``systemctl show companyd -p RestrictNamespaces -p ProcSubset -p RestrictAddressFamilies
#: -p SystemCallFilter`` as systemd 252 (Debian 12) printed it for the unit shipped before
#: the sandboxes were allowed, for the one of round 13 (sandboxes, no ``setpriority``), and
#: for the one shipped now (booted in a PID namespace by .ci/manual/unit-sandbox;
#: docs/tools.md, "Under systemd").
SHOWN = Path(__file__).with_name("systemd_show")
BEFORE = (SHOWN / "companyd-before.txt").read_text()
ROUND13 = (SHOWN / "companyd-round13.txt").read_text()
NOW = (SHOWN / "companyd-now.txt").read_text()


def _one_sandboxed_server(tmp_path: Path) -> CompanyConfig:
    """A company whose one agent has one sandboxed tool server, ``a``."""
    return load_config(
        write_company(tmp_path, {"marketing": {"mcp_servers": {"a": {"command": "x"}}}})
    )


def unit_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: str) -> Path:
    """A host whose ``systemctl show UNIT -p …`` prints ``shown``."""
    return stand_ins(tmp_path, monkeypatch, systemctl=shown)


def test_a_unit_shipped_before_forbids_what_a_tool_sandbox_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = unit_host(tmp_path, monkeypatch, BEFORE)
    assert unit_forbids_sandbox("companyd.service", runtime) == (
        "RestrictNamespaces=yes; ProcSubset=pid; RestrictAddressFamilies= without AF_NETLINK; "
        "SystemCallFilter= without capset mount pivot_root umount2"
    )


def test_the_unit_shipped_now_allows_a_tool_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = unit_host(tmp_path, monkeypatch, NOW)
    assert unit_forbids_sandbox("companyd@acme.service", runtime) is None


@pytest.mark.parametrize(
    ("changed", "forbids"),
    [
        ("RestrictNamespaces=yes", "RestrictNamespaces=yes"),
        ("RestrictNamespaces=user mnt pid ipc uts net cgroup", None),
        ("RestrictNamespaces=cgroup ipc net mnt pid uts", "RestrictNamespaces= without user"),
        ("ProcSubset=pid", "ProcSubset=pid"),
        ("RestrictAddressFamilies=", None),  # no restriction
        ("RestrictAddressFamilies=~AF_PACKET", None),
        ("RestrictAddressFamilies=~AF_NETLINK", "RestrictAddressFamilies= without AF_NETLINK"),
        ("SystemCallFilter=", None),  # no filter
        ("SystemCallFilter=~@debug ptrace", None),
        ("SystemCallFilter=~capset reboot", "SystemCallFilter= without capset"),
    ],
)
def test_each_resolved_directive_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: str, forbids: str | None
) -> None:
    key = changed.partition("=")[0]
    shown = "".join(
        f"{changed}\n" if line.startswith(f"{key}=") else f"{line}\n" for line in NOW.splitlines()
    )
    assert shown != NOW
    runtime = unit_host(tmp_path, monkeypatch, shown)
    assert unit_forbids_sandbox("companyd.service", runtime) == forbids


def test_no_systemd_or_no_unit_forbids_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = unit_host(tmp_path, monkeypatch, BEFORE)
    assert unit_forbids_sandbox("companyd.service", tmp_path / "no-systemd") is None
    (tmp_path / "bin" / "systemctl").write_text("#!/bin/sh\necho 'No files found' >&2\nexit 1\n")
    assert unit_forbids_sandbox("companyd.service", runtime) is None


def test_doctor_says_tool_servers_cannot_start_under_the_unit_that_runs_the_company(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _one_sandboxed_server(tmp_path)
    runtime = unit_host(tmp_path, monkeypatch, BEFORE)
    check = check_tool_sandbox(cfg, unit="companyd.service", systemd_runtime=runtime)
    assert check.status == "problem", check
    assert "1 tool server(s) will not start under companyd.service" in check.summary
    assert "agents.marketing.mcp_servers.a" in check.summary
    assert "RestrictNamespaces=yes" in check.summary
    assert check.fix and "sudo companyd install-service`" in check.fix, check.fix
    assert "sandbox: false" in check.fix
    instance = check_tool_sandbox(cfg, unit="companyd@acme.service", systemd_runtime=runtime)
    assert instance.fix and "install-service --instance acme`" in instance.fix, instance.fix
    # no unit runs this company.yaml (a copy elsewhere): the probe from here decides
    elsewhere = check_tool_sandbox(cfg, systemd_runtime=runtime)
    assert "will not start under" not in elsewhere.summary
    # a server already unsandboxed is not held by the unit's hardening: only the warning
    bare = {"command": "x", "sandbox": False}
    cfg = load_config(write_company(tmp_path, {"marketing": {"mcp_servers": {"a": bare}}}))
    warned = check_tool_sandbox(cfg, unit="companyd.service", systemd_runtime=runtime)
    assert warned.status == "warning" and "will not start" not in warned.summary, warned


def test_doctor_says_whose_user_the_servers_run_as_under_a_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # doctor runs as root from a shell, the shipped unit as its DynamicUser=: its servers
    # run as that user in a user namespace, not as sandbox.run_as ("nobody")
    cfg = _one_sandboxed_server(tmp_path)
    runtime = unit_host(tmp_path, monkeypatch, NOW + "User=\nDynamicUser=yes\n")
    assert unit_runs_as_root("companyd.service", runtime) is False
    under = check_tool_sandbox(cfg, unit="companyd.service", systemd_runtime=runtime)
    assert under.status == "ok", under
    assert under.summary.endswith("1 server(s) run in one, as the daemon's user"), under
    as_root = check_tool_sandbox(
        cfg, unit="companyd.service", systemd_runtime=runtime, as_root=True
    )
    assert as_root.summary.endswith("as nobody"), as_root
    (tmp_path / "systemctl.out").write_text(NOW + "User=root\nDynamicUser=no\n")
    assert unit_runs_as_root("companyd.service", runtime) is True
    assert unit_runs_as_root("companyd.service", tmp_path / "no-systemd") is None


def test_a_unit_that_refuses_setpriority_runs_the_servers_at_the_daemons_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # round 13's unit allowed the sandboxes but not setpriority: the servers start, at the
    # daemon's priority (nice cannot lower theirs); doctor warns and names the refresh
    cfg = _one_sandboxed_server(tmp_path)
    runtime = unit_host(tmp_path, monkeypatch, ROUND13 + "User=\nDynamicUser=yes\n")
    assert unit_forbids_sandbox("companyd.service", runtime) is None
    assert unit_forbids_niceness("companyd.service", runtime)
    warned = check_tool_sandbox(cfg, unit="companyd@acme.service", systemd_runtime=runtime)
    assert warned.status == "warning", warned
    assert warned.summary.startswith(
        "1 tool server(s) run in a sandbox under companyd@acme.service, but at the daemon's "
        "own priority: the unit refuses setpriority"
    )
    assert warned.fix and "`sudo companyd install-service --instance acme`" in warned.fix
    (tmp_path / "systemctl.out").write_text(NOW + "User=\nDynamicUser=yes\n")
    assert not unit_forbids_niceness("companyd.service", runtime)
    ok = check_tool_sandbox(cfg, unit="companyd.service", systemd_runtime=runtime)
    assert ok.status == "ok", ok
    # a deny list naming it, or no filter at all
    (tmp_path / "systemctl.out").write_text("SystemCallFilter=~setpriority reboot\n")
    assert unit_forbids_niceness("companyd.service", runtime)
    (tmp_path / "systemctl.out").write_text("SystemCallFilter=\n")
    assert not unit_forbids_niceness("companyd.service", runtime)
    assert not unit_forbids_niceness("companyd.service", tmp_path / "no-systemd")


def _state_on_a_small_disk(disk: Path) -> Path:
    state = disk / "state"
    scraper = state / "tools" / "marketing" / "scraper"
    for i in range(4):  # a tool server's own files: 4 x 5 MiB in directories of their own
        (scraper / f"page-{i}").mkdir(parents=True)
        (scraper / f"page-{i}" / "dump.html").write_bytes(b"x" * 5 * 2**20)
    (state / "tools" / "ceo" / "files").mkdir(parents=True)
    (state / "tools" / "ceo" / "files" / "note.md").write_text("small")
    (state / "runs.sqlite").write_bytes(b"r" * 3 * 2**20)
    (state / "spend.sqlite").write_bytes(b"s" * 1024)
    return state


def test_a_disk_running_short_names_what_fills_the_state_directory(tmp_path: Path) -> None:
    from companyd.testing.disk import DiskUnavailable, small_disk

    try:
        with small_disk(tmp_path / "disk", "48m") as disk:
            state = _state_on_a_small_disk(disk)
            check = check_disk(state)
            ticks = iter(range(10_000))  # a clock that moves 1 s at each look
            cut_short = check_disk(state, clock=lambda: float(next(ticks)))
    except DiskUnavailable as exc:
        pytest.skip(f"no small disk here: {exc}")
    assert check.status == "problem"  # 48 MiB in all: below the 100 MiB of free space
    scraper = state / "tools" / "marketing" / "scraper"
    assert check.fix == (
        "free space: below 100 MiB the run journal and the ledger start refusing writes "
        "(agents pause); the largest in the state directory: tool server 'scraper' of "
        f"marketing ({scraper}) 20 MiB, {state / 'runs.sqlite'} 3 MiB; delete old backups or "
        "logs, or grow the disk"
    )
    # a walk that runs out of time says so, and what it counted is a lower bound
    assert cut_short.fix is not None
    assert "the largest in the state directory (counting stopped after 5 s: at least)" in (
        cut_short.fix
    )
