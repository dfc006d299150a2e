"""The shipped systemd units, their packaged copies, install-service and the CI check."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.cli._daemon import UNIT_NAMES, UNIT_PREFIX_PLACEHOLDER, unit_text
from companyd.daemon._layout import INSTANCE_NAME_MAX, instance_name_problem
from companyd.testing.daemon import as_unprivileged, short_dir

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
PACKAGED = REPO / "src" / "companyd" / "daemon" / "unit_files"
CHECK = REPO / ".ci" / "checks" / "systemd"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Section → key → every value in order (systemd keys may repeat)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    section = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, val = line.partition("=")
        assert sep, f"{path.name}: not KEY=VALUE: {raw!r}"
        out[section][key.strip()].append(val.strip())
    return out


@pytest.fixture(scope="module")
def service() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNITS / "companyd.service")


@pytest.fixture(scope="module")
def alert() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNITS / "companyd-alert@.service")


@pytest.fixture(scope="module")
def template() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNITS / "companyd@.service")


@pytest.fixture(scope="module")
def instance_alert() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNITS / "companyd-instance-alert@.service")


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"[{section}] {key}= appears {len(values)} times: {values}"
    return values[0]


def test_service_lifecycle_settings(service: dict[str, dict[str, list[str]]]) -> None:
    s = "Service"
    assert one(service, s, "Type") == "notify"  # systemd 252 (Debian 12): not notify-reload
    assert "ReloadSignal" not in service[s]
    assert one(service, s, "NotifyAccess") == "main"
    assert one(service, s, "ExecStart") == (
        f"{UNIT_PREFIX_PLACEHOLDER}/bin/companyd run --config /etc/companyd/company.yaml"
    )
    assert one(service, s, "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one(service, s, "WatchdogSec") == "60s"
    assert one(service, s, "Restart") == "on-failure"
    assert one(service, s, "RestartPreventExitStatus") == "78"
    assert one(service, s, "KillMode") == "mixed"
    assert one(service, "Unit", "OnFailure") == "companyd-alert@%n.service"
    assert one(service, "Install", "WantedBy") == "multi-user.target"


def test_service_directories_and_secrets(service: dict[str, dict[str, list[str]]]) -> None:
    s = "Service"
    for key in ("StateDirectory", "RuntimeDirectory", "ConfigurationDirectory"):
        assert one(service, s, key) == "companyd"
    assert one(service, s, "StateDirectoryMode") == "0700"
    assert service[s]["LoadCredential"] == [
        "anthropic_api_key:/etc/companyd/anthropic_api_key",
        "telegram_bot_token:/etc/companyd/telegram_bot_token",
    ]
    for env in service[s].get("Environment", []):
        assert not any(word in env.upper() for word in ("KEY", "TOKEN", "SECRET")), env
    assert one(service, s, "UMask") == "0077"


def test_service_hardening(service: dict[str, dict[str, list[str]]]) -> None:
    s = service["Service"]
    expected = {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "MemoryDenyWriteExecute": "yes",
        "LockPersonality": "yes",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
        "PrivateUsers": "yes",
        "ProtectProc": "invisible",
        # what the tool servers' bubblewrap sandboxes need, each seen needed under systemd
        # 252 (docs/tools.md, "Under systemd"), and no more
        "RestrictNamespaces": "user mnt pid ipc uts net cgroup",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "ProcSubset": "all",
    }
    for key, val in expected.items():
        assert s.get(key) == [val], f"{key}={s.get(key)}"
    assert s["SystemCallFilter"] == [
        "@system-service",
        "~@privileged @resources",
        "@mount capset setpriority",
    ]


def test_alert_unit(alert: dict[str, dict[str, list[str]]]) -> None:
    s = "Service"
    assert one(alert, s, "Type") == "oneshot"
    assert one(alert, s, "ExecStart") == f"{UNIT_PREFIX_PLACEHOLDER}/bin/companyd notify-failure %i"
    assert alert[s]["LoadCredential"] == ["telegram_bot_token:/etc/companyd/telegram_bot_token"]
    assert one(alert, s, "ConfigurationDirectory") == "companyd"  # → $CONFIGURATION_DIRECTORY
    assert "StateDirectory" not in alert[s]  # DynamicUser would re-own the daemon's state
    assert one(alert, s, "DynamicUser") == "yes"
    assert one(alert, s, "NoNewPrivileges") == "yes"


def test_template_is_the_single_unit_per_company(
    service: dict[str, dict[str, list[str]]], template: dict[str, dict[str, list[str]]]
) -> None:
    s = "Service"
    assert one(template, s, "ExecStart") == (
        f"{UNIT_PREFIX_PLACEHOLDER}/bin/companyd run --config /etc/companyd/%i/company.yaml"
    )
    for key in ("StateDirectory", "RuntimeDirectory", "ConfigurationDirectory"):
        assert one(template, s, key) == "companyd/%i"
    assert one(template, s, "WorkingDirectory") == "/var/lib/companyd/%i"
    # one dynamic user per company (the default would be "companyd" for every instance)
    assert one(template, s, "User") == "companyd-%i"
    assert template[s]["LoadCredential"] == [
        "anthropic_api_key:/etc/companyd/%i/anthropic_api_key",
        "telegram_bot_token:/etc/companyd/%i/telegram_bot_token",
        "companyd_database_url:/etc/companyd/%i/companyd_database_url",
    ]
    # the database URL is optional: SetCredential= of the same id is LoadCredential='s
    # default when the file is missing (systemd 252 has no ImportCredential=)
    assert template[s]["SetCredential"] == ["companyd_database_url:\\n"]
    assert one(template, "Unit", "OnFailure") == "companyd-instance-alert@%i.service"
    # the optional environment file (TELEGRAM_CHAT_ID: `companyd telegram setup --env-file`)
    assert one(template, s, "EnvironmentFile") == "-/etc/companyd/%i/companyd.env"
    assert one(service, s, "EnvironmentFile") == "-/etc/companyd/companyd.env"
    # everything else, the hardening included, is the single unit's, value for value
    differ = {
        "ExecStart", "StateDirectory", "RuntimeDirectory", "ConfigurationDirectory",
        "WorkingDirectory", "User", "LoadCredential", "SetCredential", "OnFailure",
        "Description", "EnvironmentFile",
    }  # fmt: skip
    for section in ("Unit", "Service", "Install"):
        mine = {k: v for k, v in template[section].items() if k not in differ}
        theirs = {k: v for k, v in service[section].items() if k not in differ}
        assert mine == theirs, section


def test_instance_alert_unit_reads_the_company_of_its_instance(
    alert: dict[str, dict[str, list[str]]], instance_alert: dict[str, dict[str, list[str]]]
) -> None:
    s = "Service"
    assert one(instance_alert, s, "ExecStart") == (
        f"{UNIT_PREFIX_PLACEHOLDER}/bin/companyd notify-failure companyd@%i.service"
    )
    assert instance_alert[s]["LoadCredential"] == [
        "telegram_bot_token:/etc/companyd/%i/telegram_bot_token"
    ]
    assert one(instance_alert, s, "ConfigurationDirectory") == "companyd/%i"
    assert one(instance_alert, s, "User") == "companyd-%i"
    assert "StateDirectory" not in instance_alert[s]
    # the chat id: the same environment file as the company's own unit
    assert one(instance_alert, s, "EnvironmentFile") == "-/etc/companyd/%i/companyd.env"
    assert one(alert, s, "EnvironmentFile") == "-/etc/companyd/companyd.env"
    differ = {"ExecStart", "ConfigurationDirectory", "LoadCredential", "User", "EnvironmentFile"}
    mine = {k: v for k, v in instance_alert[s].items() if k not in differ}
    assert mine == {k: v for k, v in alert[s].items() if k not in differ}


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("acme", None),
        ("bakery-berlin_2", None),
        ("a" * INSTANCE_NAME_MAX, None),
        ("a" * (INSTANCE_NAME_MAX + 1), "at most 22 fit"),
        ("Acme", "cannot be a systemd instance name"),
        ("acme co", "cannot be a systemd instance name"),
        ("-acme", "cannot be a systemd instance name"),
        ("acme/../x", "cannot be a systemd instance name"),
        ("", "cannot be a systemd instance name"),
    ],
)
def test_instance_names(name: str, problem: str | None) -> None:
    found = instance_name_problem(name)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and repr(name) in found


def test_the_packaged_units_are_the_shipped_ones() -> None:
    for name in UNIT_NAMES:
        assert (PACKAGED / name).read_bytes() == (UNITS / name).read_bytes(), (
            f"src/companyd/daemon/unit_files/{name} differs from systemd/{name}; "
            "copy systemd/ over it"
        )
        assert unit_text(name, Path(UNIT_PREFIX_PLACEHOLDER)) == (UNITS / name).read_text()


def _run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _fake_prefix(tmp_path: Path) -> Path:
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    exe = prefix / "bin" / "companyd"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return prefix


def test_install_service_writes_units_config_and_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix, root = _fake_prefix(tmp_path), tmp_path / "root"
    yaml = tmp_path / "company.yaml"
    yaml.write_text("schema: companyd/v1\n")
    code, out, err = _run(
        "install-service", "--prefix", str(prefix), "--root", str(root), "--config", str(yaml),
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    unit = root / "etc/systemd/system/companyd.service"
    text = unit.read_text()
    assert f"ExecStart={prefix}/bin/companyd run --config /etc/companyd/company.yaml" in text
    assert UNIT_PREFIX_PLACEHOLDER not in text
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    alert = (root / "etc/systemd/system/companyd-alert@.service").read_text()
    assert f"ExecStart={prefix}/bin/companyd notify-failure %i" in alert
    conf = root / "etc/companyd"
    assert (conf / "company.yaml").read_text() == "schema: companyd/v1\n"
    for cred in ("anthropic_api_key", "telegram_bot_token"):
        assert (conf / cred).read_bytes() == b""
        assert stat.S_IMODE((conf / cred).stat().st_mode) == 0o600
    assert "systemctl daemon-reload && sudo systemctl enable --now companyd" in out

    # Again: secrets and company.yaml already there are never touched.
    (conf / "anthropic_api_key").write_text("sk-real")
    (conf / "company.yaml").write_text("mine\n")
    code, out, _ = _run(
        "install-service", "--prefix", str(prefix), "--root", str(root), "--config", str(yaml),
        capsys=capsys,
    )  # fmt: skip
    assert code == 0 and "keep the existing" in out
    assert (conf / "anthropic_api_key").read_text() == "sk-real"
    assert (conf / "company.yaml").read_text() == "mine\n"

    # The upgrade (docs/deploy.md): no --config; the next steps do not ask to write one.
    code, out, _ = _run(
        "install-service", "--prefix", str(prefix), "--root", str(root), capsys=capsys
    )  # fmt: skip
    assert code == 0 and "company.yaml: check /etc/companyd/company.yaml" in out
    assert "companyd init" not in out
    assert (conf / "company.yaml").read_text() == "mine\n"


def test_install_service_instance_installs_the_template_and_the_company_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix, root = _fake_prefix(tmp_path), tmp_path / "root"
    yaml = tmp_path / "company.yaml"
    yaml.write_text("schema: companyd/v1\n")
    argv = ["install-service", "--prefix", str(prefix), "--root", str(root), "--instance", "acme"]
    code, out, err = _run(*argv, "--config", str(yaml), capsys=capsys)
    assert code == 0, err
    units = root / "etc/systemd/system"
    assert sorted(p.name for p in units.iterdir()) == [
        "companyd-instance-alert@.service",
        "companyd@.service",
    ]  # not companyd.service: both on one host would share /var/lib/companyd
    text = (units / "companyd@.service").read_text()
    assert f"ExecStart={prefix}/bin/companyd run --config /etc/companyd/%i/company.yaml" in text
    assert UNIT_PREFIX_PLACEHOLDER not in text
    conf = root / "etc/companyd/acme"
    assert (conf / "company.yaml").read_text() == "schema: companyd/v1\n"
    for cred in ("anthropic_api_key", "telegram_bot_token"):
        assert (conf / cred).read_bytes() == b""
        assert stat.S_IMODE((conf / cred).stat().st_mode) == 0o600
    assert not (conf / "companyd_database_url").exists()  # optional: SetCredential= default
    assert "/etc/companyd/acme/anthropic_api_key" in out
    assert "/etc/companyd/acme/companyd_database_url" in out
    assert "sudo systemctl daemon-reload && sudo systemctl enable --now companyd@acme" in out
    assert "sudo companyd status --config /etc/companyd/acme/company.yaml" in out
    assert "journalctl -u companyd@acme -f" in out

    # a second company next to it; the first one's files are untouched
    (conf / "anthropic_api_key").write_text("sk-acme")
    code, out, err = _run(*argv[:-1], "bakery", capsys=capsys)
    assert code == 0, err
    assert (root / "etc/companyd/bakery/anthropic_api_key").read_bytes() == b""
    assert "company.yaml: write /etc/companyd/bakery/company.yaml" in out
    assert "`companyd init /etc/companyd/bakery`" in out
    assert (conf / "anthropic_api_key").read_text() == "sk-acme"


@pytest.mark.parametrize("name", ["Acme", "acme co", "../etc", "a" * 23])
def test_install_service_refuses_an_instance_name_systemd_cannot_take(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    code, out, err = _run(
        "install-service", "--prefix", str(_fake_prefix(tmp_path)), "--root", str(root),
        "--instance", name, capsys=capsys,
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("companyd install-service: --instance: ") and repr(name) in err
    assert not root.exists()


def test_install_service_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    code, out, _ = _run(
        "install-service", "--dry-run", "--prefix", str(_fake_prefix(tmp_path)), "--root",
        str(root), capsys=capsys,
    )  # fmt: skip
    assert code == 0
    assert "would" in out and f"write {root}/etc/systemd/system/companyd.service" in out
    assert not root.exists()


def test_install_service_refuses_a_prefix_without_companyd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        "install-service", "--prefix", str(tmp_path / "nowhere"), "--root", str(tmp_path),
        capsys=capsys,
    )  # fmt: skip
    assert code == 2 and "there is no companyd executable at" in err and "--prefix" in err
    spaced = tmp_path / "my venv"
    code, _, err = _run("install-service", "--prefix", str(spaced), capsys=capsys)
    assert code == 2 and "contains whitespace" in err


def test_install_service_without_permission_says_sudo() -> None:
    with short_dir() as base:
        base.chmod(0o755)  # readable by everyone ...
        prefix = _fake_prefix(base)
        root = base / "ro"
        root.mkdir(mode=0o555)  # ... but nobody may write here
        argv = ["install-service", "--prefix", str(prefix), "--root", str(root)]
        # `nobody` may not read this interpreter's own files (under /root on these machines):
        # run the command once where it may write, so the child has imported all it needs
        warm = base / "warm"
        warm.mkdir()
        assert _attempt([*argv[:-1], str(warm)]).startswith("0|")
        # root may write anywhere: then run it as `nobody` in a forked child
        run = as_unprivileged if os.geteuid() == 0 else (lambda fn: fn())
        result = run(lambda: _attempt(argv))
        assert not any(root.iterdir())
    code, _, err = result.partition("|")
    assert code == "1", err
    assert "permission denied; run it as root (`sudo companyd install-service`)" in err


def _attempt(argv: list[str]) -> str:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return f"{code}|{err.getvalue()}"


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (Debian: apt-get install systemd); "
    ".ci/checks/systemd installs it in CI",
)


@needs_systemd_analyze
def test_ci_check_passes_on_the_shipped_units() -> None:
    out = subprocess.run([str(CHECK)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "verify OK: companyd.service companyd@acme.service companyd-alert@acme.service "
        "companyd-instance-alert@acme.service" in out.stdout
    )
    assert "security OK: companyd.service exposure" in out.stdout
    assert "security OK: companyd@acme.service exposure" in out.stdout


def _weaken(text: str) -> str:
    """The unit without its hardening block (what a careless edit could do)."""
    head, _, rest = text.partition("# Hardening")
    _, _, tail = rest.partition("[Install]")
    return head + "[Install]" + tail


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("Type=notify", "Type=notify-reload"), "Failed to parse service type"),
        (lambda t: t.replace("WatchdogSec=", "WatchdogSecs="), "Unknown key 'WatchdogSecs'"),
        (
            lambda t: t.replace("ExecStart=/", "ExecStart=relative/"),
            "Neither a valid executable name nor an absolute path",
        ),
        (_weaken, "exposure"),
    ],
    ids=["notify-reload-on-252", "misspelt-key", "relative-exec", "hardening-removed"],
)
@pytest.mark.parametrize("name", ["companyd.service", "companyd@.service"])
def test_ci_check_fails_on_a_broken_or_weakened_unit(
    tmp_path: Path, edit: Callable[[str], str], message: str, name: str
) -> None:
    text = (UNITS / name).read_text()
    unit = tmp_path / name
    unit.write_text(edit(text))
    assert unit.read_text() != text
    out = subprocess.run([str(CHECK), str(unit)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout
    assert message in out.stderr, out.stderr


@needs_systemd_analyze
def test_ci_check_fails_on_a_template_whose_credential_is_not_optional(tmp_path: Path) -> None:
    # `SetCredential=ID:` (an empty default) is invalid syntax on systemd 252: the unit
    # would then fail to start without the database URL file
    text = (UNITS / "companyd@.service").read_text()
    unit = tmp_path / "companyd@.service"
    unit.write_text(text.replace("companyd_database_url:\\n", "companyd_database_url:"))
    assert unit.read_text() != text
    out = subprocess.run([str(CHECK), str(unit)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout
    assert "Invalid syntax" in out.stderr and "companyd_database_url" in out.stderr


@pytest.mark.parametrize(
    ("prefix", "where"),
    [
        ("/home/alice/companyd/.venv", "under /home"),
        ("/root/companyd/.venv", "under /root"),
        ("/run/user/1000/venv", "under /run/user"),
        ("/var/tmp/venv", "under /var/tmp"),
    ],
)
def test_install_service_refuses_a_prefix_its_hardening_hides(
    prefix: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run("install-service", "--dry-run", "--prefix", prefix, capsys=capsys)
    assert code == 2, (out, err)
    assert f"the prefix {prefix!r} is {where}" in err
    assert "ProtectHome=yes" in err and "PrivateTmp=yes" in err
    assert "/opt/companyd/venv" in err and "docs/deploy.md" in err  # the fix
    assert "would" not in out  # nothing planned


def test_install_service_refuses_a_tmp_checkout_venv_and_one_linked_into_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil
    import tempfile

    from companyd.cli._daemon import hidden_by_hardening

    if not str(tmp_path.resolve()).startswith("/tmp/"):
        pytest.skip(f"the test's temporary directory {tmp_path} is not under /tmp here")
    prefix = _fake_prefix(tmp_path)  # a checkout's venv under /tmp: PrivateTmp hides it
    code, _, err = _run("install-service", "--prefix", str(prefix), capsys=capsys)
    assert code == 2 and "is under /tmp" in err
    assert hidden_by_hardening(Path("/opt/companyd/venv")) is None
    # a prefix outside (/dev/shm: neither hidden nor private), symlinked to a hidden one,
    # is hidden as well
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        base = Path(tempfile.mkdtemp(dir=shm))
        try:
            link = base / "venv"
            link.symlink_to(prefix)
            assert "through a symlink" in (hidden_by_hardening(link) or "")
            code, _, err = _run("install-service", "--prefix", str(link), capsys=capsys)
            assert code == 2 and "through a symlink" in err
        finally:
            shutil.rmtree(base)
    # staging a package with --root only warns: the prefix is the target machine's
    root = tmp_path / "root"
    code, _, err = _run(
        "install-service", "--prefix", str(prefix), "--root", str(root), capsys=capsys
    )
    assert code == 0 and err.startswith("warning: the prefix")
