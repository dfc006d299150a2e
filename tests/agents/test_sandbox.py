"""Every MCP tool server runs in a bubblewrap sandbox (issue 29): a hostile server reaches
nothing of the daemon's, and the same server unsandboxed reaches all of it — so the tests
prove the sandbox, not the server. Real bubblewrap, real subprocess MCP servers over stdio,
the real daemon in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    TOOL_SERVER,
    PerAgent,
    running_company,
    tool_results,
    tool_server,
    write_company,
)
from companyd.admin import ReloadApplied
from companyd.agents import McpServerFailed, McpToolServer
from companyd.clock import ManualClock
from companyd.config import McpServerSpec, load_config
from companyd.errors import ConfigError
from companyd.events import Severity
from companyd.ops._doctor import check_tool_sandbox
from companyd.sandbox import (
    SERVER_NICENESS,
    SandboxUnavailable,
    ToolSandbox,
    interpreter_prefixes,
    probe_sandbox,
    server_dir,
)
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

PROBE_SERVER = Path(__file__).parent.parent / "mcp_probe_server.py"
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port listening on the host's loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _probe_company(
    tmp_path: Path, port: int, sandbox: dict[str, Any] | bool
) -> tuple[Path, dict[str, str]]:
    """A company whose marketing agent has the probe server (with ``sandbox``) and a second
    server; the daemon's secrets and another server's file are in place. Returns the
    config and what the probe tries, by kind.
    """
    state = tmp_path / "state"
    state.mkdir()
    (state / "notes.txt").write_text("a state file")
    other = server_dir(state, "marketing", "other")
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("the other server's")
    creds = Path(os.environ["CREDENTIALS_DIRECTORY"])
    (creds / "anthropic_api_key").write_text("sk-ant-secret")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by anyone: only the sandbox's read-only bind stops a write
    cfg_path = tmp_path / "company.yaml"
    targets = {
        "company.yaml": str(cfg_path),
        "state file": str(state / "notes.txt"),
        "credential": str(creds / "anthropic_api_key"),
        "other server": str(other / "secret.txt"),
    }
    env: dict[str, str] = {
        "PROBE_READ": ":".join(targets.values()),
        "PROBE_LIST": f"{Path.home()}:{creds}",
        "PROBE_WRITE": f"{tmp_path / 'outside.txt'}:{shared / 'dropped.txt'}",
        "PROBE_PORT": str(port),
        "PROBE_PID": str(os.getpid()),
    }
    probe: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(PROBE_SERVER)],
        "risk": "trusted",
        "sandbox": sandbox,
        "env": env,
    }
    if sandbox is False:
        env["PROBE_OWN"] = str(shared)
    if isinstance(sandbox, dict):
        sandbox.setdefault("read", []).append(str(PROBE_SERVER.parent))
        sandbox["read"].append(str(shared))
    other_spec = {"command": sys.executable, "args": [str(TOOL_SERVER)], "sandbox": False}
    write_company(tmp_path, {"marketing": {"mcp_servers": {"probe": probe, "other": other_spec}}})
    return cfg_path, targets


async def _run_probe(cfg: Path, state: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    model = PerAgent(marketing=[reply_tool_use("probe", {}), reply_text("Probed.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, state, srv) as d:
            out = await d.ask("marketing", "Probe.")
    assert out.status == "ok", out
    result = tool_results(srv.requests[1])[0]
    assert not result.get("is_error"), result
    found = json.loads(result["content"])
    return found["results"], found["listings"]


@pytest.fixture
def credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    creds = tmp_path / "creds"
    creds.mkdir(mode=0o700)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    return creds


@pytest.mark.anyio
async def test_a_sandboxed_server_reaches_nothing_of_the_daemon_but_its_own_directory(
    tmp_path: Path, listener: int, credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "PGPASSWORD"):
        monkeypatch.setenv(var, "the daemon's")
    cfg, targets = _probe_company(tmp_path, listener, {"network": False})
    found, listings = await _run_probe(cfg, tmp_path / "state")
    # nothing of the daemon's environment but what the sandbox sets and company.yaml names
    assert set(listings.pop("environ")) == {"PATH", "HOME", "LANG", "TMPDIR", "PWD"} | {
        f"PROBE_{k}" for k in ("READ", "LIST", "WRITE", "PORT", "PID")
    }
    # no file of the daemon's open (its stores, the memory, the locks): the server's own
    # descriptors are pipes, sockets and its event loop's, and of the daemon's only its
    # stderr (where the server's errors go: the daemon's log)
    files = {fd.split(" -> ")[1] for fd in listings.pop("/proc/self/fd") if " -> /" in fd}
    assert files <= {"/dev/null", os.readlink("/proc/self/fd/2")}, files
    own = server_dir((tmp_path / "state").resolve(), "marketing", "probe")
    assert found.pop("own directory") == "ok"
    assert found.pop("cwd") == found.pop("home") == str(own)
    assert (own / "own.txt").read_text() == "mine"  # kept in the state dir, across restarts
    uid = found.pop("uid")
    if AS_ROOT:
        assert uid == "65534"  # nobody, not root
    # below the daemon's priority: a spinning server does not starve the daemon's loop
    assert found.pop("niceness") == str(os.getpriority(os.PRIO_PROCESS, 0) + SERVER_NICENESS)
    assert set(found) == {
        *(f"read {p}" for p in targets.values()),
        f"list {Path.home()}",
        f"list {credentials}",
        f"write {tmp_path / 'outside.txt'}",
        f"write {tmp_path / 'shared' / 'dropped.txt'}",
        f"connect 127.0.0.1:{listener}",
        f"environ of {os.getpid()}",
    }
    # The home directory exists in the sandbox only where an interpreter's prefix is bound
    # below it (a pyenv Python under ~/.pyenv): the server then sees that path, none of the
    # home's own files.
    home = str(Path.home())
    if found[f"list {home}"] == "ok":
        found.pop(f"list {home}")
        above = {
            Path(p).relative_to(home).parts[0]
            for p in interpreter_prefixes(sys.executable)
            if p.startswith(home + "/")
        }
        assert set(listings[home]) <= above, listings[home]
    leaked = {what: why for what, why in found.items() if why == "ok"}
    assert leaked == {}, leaked
    assert "Read-only file system" in found[f"write {tmp_path / 'shared' / 'dropped.txt'}"]
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.anyio
async def test_the_same_server_unsandboxed_reaches_all_of_it(
    tmp_path: Path, listener: int, credentials: Path
) -> None:
    # The control: `sandbox: false` runs the server as before, and every attempt succeeds —
    # what stopped them above is the sandbox, not the probe.
    cfg, _ = _probe_company(tmp_path, listener, False)
    found, listings = await _run_probe(cfg, tmp_path / "state")
    # unsandboxed, the server also runs at the daemon's own priority
    assert found.pop("niceness") == str(os.getpriority(os.PRIO_PROCESS, 0))
    for key in ("cwd", "home", "uid"):
        found.pop(key)
    failed = {what: why for what, why in found.items() if why != "ok"}
    assert failed == {}, failed
    assert (tmp_path / "outside.txt").read_text() == "escaped"
    assert set(listings[str(Path.home())]) == set(os.listdir(Path.home()))


@pytest.mark.anyio
async def test_network_true_keeps_the_hosts_network(
    tmp_path: Path, listener: int, credentials: Path
) -> None:
    cfg, _ = _probe_company(tmp_path, listener, {"network": True})
    found, _ = await _run_probe(cfg, tmp_path / "state")
    assert found[f"connect 127.0.0.1:{listener}"] == "ok"
    assert found[f"read {tmp_path / 'company.yaml'}"] != "ok"


def _fake_bin(tmp_path: Path, bwrap: str | None) -> dict[str, str]:
    """A PATH with setpriv, prlimit and nice, and ``bwrap`` (a script body) or none."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("setpriv", "prlimit", "nice", "true"):
        (fake / tool).symlink_to(f"/usr/bin/{tool}")
    if bwrap is not None:
        (fake / "bwrap").write_text(f"#!/bin/sh\n{bwrap}\n")
        (fake / "bwrap").chmod(0o755)
    return {"PATH": str(fake)}


# bubblewrap's own message where the kernel refuses unprivileged user namespaces
REFUSED = (
    'echo "bwrap: No permissions to creating new namespace, likely because the kernel does '
    "not allow non-privileged user namespaces. On e.g. debian this can be enabled with "
    "'sysctl kernel.unprivileged_userns_clone=1'.\" >&2; exit 1"
)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("bwrap", "fix"),
    [
        (None, "install it (`apt-get install bubblewrap`)"),
        (REFUSED, "refuses unprivileged user namespaces: enable them"),
        (REFUSED, "systemd service whose unit forbids what bubblewrap needs"),
    ],
    ids=["no-bubblewrap", "no-user-namespaces", "under-systemd"],
)
async def test_where_no_sandbox_can_be_made_the_server_does_not_start_and_the_reason_names_the_fix(
    tmp_path: Path, bwrap: str | None, fix: str
) -> None:
    # A kernel that refuses user namespaces (or a unit with RestrictNamespaces=yes) cannot
    # be had on a test machine; bubblewrap's own refusal stands in for it (the real bwrap
    # is used everywhere else). Under systemd (INVOCATION_ID) the unit is the likely
    # cause, not the kernel: the sysctl would not help.
    env = _fake_bin(tmp_path, bwrap)
    if fix.startswith("systemd"):
        env["INVOCATION_ID"] = "0123456789abcdef0123456789abcdef"
    sandbox = ToolSandbox(tmp_path / "state", environ=env, as_root=False)
    (tmp_path / "state").mkdir()
    spec = McpServerSpec(command=sys.executable, args=(str(TOOL_SERVER),))

    def launch() -> Any:
        return sandbox.launch("marketing", "social", spec)

    with pytest.raises(McpServerFailed) as caught:
        async with McpToolServer("social", spec, launcher=launch):
            pass
    reason = caught.value.reason
    assert reason.startswith("was not started: ")
    assert fix in reason and "`sandbox: false`" in reason, reason
    assert not (tmp_path / "state" / "tools").exists()  # nothing was started


def test_a_sandbox_bubblewrap_gave_up_on_half_way_leaves_nothing_behind(tmp_path: Path) -> None:
    # Under a unit whose SystemCallFilter= refuses capset (systemd 252), bwrap exits with its
    # reason while the sandbox's init it already made waits forever, holding the probe's
    # pipes: the probe waited out its timeout, said "did not finish", and left that process
    # behind at every retry. A stand-in bwrap does the same: exits, a child keeps the pipes.
    holder = tmp_path / "holder.pid"
    env = _fake_bin(
        tmp_path,
        f"sleep 600 & echo $! > {holder}\n"
        'echo "bwrap: capset failed: Operation not permitted" >&2; exit 1',
    )
    env["INVOCATION_ID"] = "0123456789abcdef0123456789abcdef"
    with pytest.raises(SandboxUnavailable) as caught:
        probe_sandbox(as_root=False, environ=env, timeout=1.0)
    reason = str(caught.value)
    assert "capset failed" in reason and "systemd service whose unit forbids" in reason, reason
    pid = int(holder.read_text())
    with pytest.raises(ProcessLookupError):  # killed with bwrap's process group, and reaped
        for _ in range(100):  # by init: gone within moments of the kill
            os.kill(pid, 0)
            time.sleep(0.05)


@pytest.mark.anyio
async def test_a_declared_path_may_not_expose_the_state_directory_or_company_yaml(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "company.yaml"
    cfg.write_text("")
    sandbox = ToolSandbox(state, protected=[cfg])
    for read, what in ((str(tmp_path), "state directory"), (str(state / "x"), "state")):
        (state / "x").mkdir(exist_ok=True)
        spec = McpServerSpec.model_validate(
            {"command": sys.executable, "sandbox": {"read": [read]}}
        )
        with pytest.raises(McpServerFailed, match=what):
            async with McpToolServer("s", spec, launcher=partial(sandbox.launch, "a", "s", spec)):
                pass
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "company.yaml").write_text("")
    sandbox = ToolSandbox(state, protected=[beside / "company.yaml"])
    spec = McpServerSpec.model_validate(
        {"command": sys.executable, "sandbox": {"write": [str(beside)]}}
    )
    with pytest.raises(McpServerFailed, match=r"would show .*company\.yaml"):
        async with McpToolServer("s", spec, launcher=partial(sandbox.launch, "a", "s", spec)):
            pass


def test_a_secret_in_args_is_refused_by_validate(tmp_path: Path) -> None:
    bad = {"command": "gh-mcp", "args": ["--token", "${GITHUB_TOKEN}"]}
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"gh": bad}}})
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    text = str(caught.value)
    assert "agents.marketing.mcp_servers.gh.args" in text, text
    assert "'${GITHUB_TOKEN}'" in text and "env_from: {GITHUB_TOKEN: GITHUB_TOKEN}" in text, text


async def _run_in_sandbox(
    tmp_path: Path,
    code: str,
    *args: str,
    limits: dict[str, int] | None = None,
    as_root: bool | None = None,
) -> Any:
    """Run ``python -c code args…`` in a tool server's sandbox (launched as the daemon
    does, without the MCP handshake: fast) and return what it printed, read as JSON.
    """
    spec = McpServerSpec.model_validate(
        {"command": sys.executable, "args": ["-c", code, *args], "limits": limits or {}}
    )
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    launch = await ToolSandbox(state, as_root=as_root).launch("marketing", "probe", spec)
    assert launch.sandboxed
    proc = await asyncio.create_subprocess_exec(
        launch.command,
        *launch.args,
        env=launch.env,
        cwd=launch.cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


@pytest.mark.anyio
async def test_the_system_files_a_server_needs_are_readable_by_its_user(tmp_path: Path) -> None:
    """Name resolution, CA certificates, OpenSSL's configuration and the user database are
    readable by the server's user (nobody when the daemon is root): bubblewrap makes /etc
    0700 root's unless told otherwise, and then Node did not even start ("OpenSSL
    configuration error") and no host name resolved.
    """
    wanted = [
        p
        for p in (
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/passwd",
            "/etc/ssl/openssl.cnf",
            "/etc/ssl/certs/ca-certificates.crt",
        )
        if os.path.isfile(p)
    ]
    assert "/etc/passwd" in wanted
    code = (
        "import json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p, 'rb').read(1); out[p] = 'ok'\n"
        "    except OSError as e:\n"
        "        out[p] = e.strerror\n"
        "print(json.dumps(out))\n"
    )
    found = await _run_in_sandbox(tmp_path, code, *wanted)
    assert found == dict.fromkeys(wanted, "ok")


def test_the_interpreter_prefix_is_bound_for_a_virtualenv_python() -> None:
    prefixes = interpreter_prefixes(sys.executable)
    if sys.prefix != sys.base_prefix:  # the suite runs in a virtualenv
        assert os.path.normpath(sys.prefix) in prefixes


def test_doctor_checks_the_sandbox_and_names_each_unsandboxed_server(tmp_path: Path) -> None:
    boxed = {"command": sys.executable}
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"a": boxed}}})
    ok = check_tool_sandbox(load_config(cfg))
    assert ok.status == "ok", ok
    bare = {"command": sys.executable, "sandbox": False}
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"a": boxed, "b": bare}}})
    warned = check_tool_sandbox(load_config(cfg))
    assert warned.status == "warning", warned
    assert "agents.marketing.mcp_servers.b" in warned.summary
    assert "mcp_servers.a" not in warned.summary


def test_doctor_says_when_no_sandbox_can_be_made_and_how_to_fix_it(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"a": {"command": "x"}}}})
    env = _fake_bin(tmp_path, None)  # no bubblewrap
    check = check_tool_sandbox(load_config(cfg), environ=env)
    assert check.status == "problem", check
    assert "agents.marketing.mcp_servers.a" in check.summary
    assert "apt-get install bubblewrap" in check.summary and check.fix
    bare = write_company(
        tmp_path, {"marketing": {"mcp_servers": {"a": {"command": "x", "sandbox": False}}}}
    )
    assert check_tool_sandbox(load_config(bare), environ=env).status == "warning"


async def _wait_for(predicate: Any, timeout: float = 60) -> Any:
    async with asyncio.timeout(timeout):
        while not (value := predicate()):
            await asyncio.sleep(0.02)
        return value


@pytest.mark.anyio
@pytest.mark.parametrize("memory_mb", [256, 0], ids=["limited", "unlimited"])
async def test_a_server_killed_by_its_memory_limit_is_restarted_with_one_alert_not_a_crashed_agent(
    tmp_path: Path, memory_mb: int
) -> None:
    social = tool_server()
    social["limits"] = {"memory_mb": memory_mb}
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    clock = ManualClock()
    model = PerAgent(
        marketing=[
            reply_tool_use("hog", {"mb": 512}),
            reply_tool_use("read_inbox", {}),
            reply_text("The tool server fell over; carried on."),
            reply_tool_use("read_inbox", {}),
            reply_text("Back."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            assert (await d.ask("marketing", "Hog.")).status == "ok"
            hog, inbox = tool_results(srv.requests[1])[0], tool_results(srv.requests[2])[0]
            if not memory_mb:
                # the control: without the limit the same call succeeds
                assert hog["content"] == "allocated 512 MiB", hog
                return
            assert hog["is_error"] and "failed during 'hog'" in hog["content"], hog
            assert inbox["is_error"] and "is not running" in inbox["content"], inbox
            failed = d.bus.recent({"mcp_server_failed"}, limit=10)
            assert [(e.severity, e.data["attempt"]) for e in failed] == [(Severity.WARNING, 1)]
            assert "memory_mb 256" in failed[0].data["reason"]
            clock.advance(5)  # the first retry wait
            recovered = await _wait_for(lambda: d.bus.recent({"mcp_server_recovered"}, limit=10))
            assert recovered[0].data["attempt"] == 2
            assert (await d.ask("marketing", "Again.")).status == "ok"
            restarts = d.bus.recent({"restart", "child_exited"}, limit=100)
    assert "move the launch to Friday" in tool_results(srv.requests[-1])[0]["content"]
    assert not [e for e in restarts if e.data.get("child") == "marketing"]
    assert len(d.bus.recent({"mcp_server_failed"}, limit=10)) == 1  # alerted once


@pytest.mark.anyio
@pytest.mark.parametrize("file_mb", [2, 0], ids=["limited", "unlimited"])
async def test_a_server_cannot_write_a_file_past_its_file_limit(
    tmp_path: Path, file_mb: int
) -> None:
    social = dict(tool_server(), limits={"file_mb": file_mb})
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    model = PerAgent(
        marketing=[
            reply_tool_use("scribble", {"mb": 5}),
            reply_tool_use("read_inbox", {}),
            reply_text("Noted."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            assert (await d.ask("marketing", "Scribble.")).status == "ok"
    written = server_dir((tmp_path / "state").resolve(), "marketing", "social") / "scribble.bin"
    scribbled, inbox = tool_results(srv.requests[1])[0], tool_results(srv.requests[2])[0]
    if not file_mb:  # the control: without the limit the same call writes it all
        assert scribbled["content"] == "wrote 5 MiB", scribbled
        assert written.stat().st_size == 5 * 2**20
        return
    # the write past the limit fails (a Python server gets EFBIG: the SDK reports "Error
    # executing tool scribble"), the file stops at it, and the server runs on
    assert scribbled["is_error"], scribbled
    assert written.stat().st_size == file_mb * 2**20
    assert "move the launch to Friday" in inbox["content"]


@pytest.mark.anyio
@pytest.mark.parametrize("as_root", [None, False], ids=["as-the-daemon", "user-namespace"])
async def test_a_server_cannot_fill_memory_past_its_limit_through_a_tmpfs(
    tmp_path: Path, as_root: bool | None
) -> None:
    """``/tmp`` (and ``/dev/shm``, and the sandbox's root in a user namespace) are tmpfs:
    RAM that RLIMIT_AS does not count. Unbounded, each could take half the machine's
    memory (the kernel's default size), whatever ``memory_mb`` says.
    """
    code = (
        "import json, os, sys\n"
        "out = {}\n"
        "chunk = b'x' * (1 << 20)\n"
        "for d in sys.argv[2:]:\n"
        "    n = 0\n"
        "    try:\n"
        "        with open(os.path.join(d, 'fill'), 'wb') as f:\n"
        "            while n < int(sys.argv[1]):\n"
        "                f.write(chunk); f.flush(); n += 1\n"
        "        out[d] = n\n"
        "    except OSError as e:\n"
        "        out[d] = f'{n} MiB, then {e.strerror}'\n"
        "    if os.path.exists(os.path.join(d, 'fill')):\n"
        "        os.remove(os.path.join(d, 'fill'))\n"
        "print(json.dumps(out))\n"
    )
    found = await _run_in_sandbox(
        tmp_path,
        code,
        "160",
        "/tmp",
        "/dev/shm",
        "/dev",
        "/",
        limits={"memory_mb": 96},
        as_root=as_root,
    )
    over = {d: n for d, n in found.items() if n == 160}
    assert over == {}, found
    assert found["/tmp"].endswith("No space left on device"), found  # usable, bounded


@pytest.mark.anyio
async def test_a_declared_path_may_not_expose_the_memory_the_backups_or_the_control_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lives outside the state directory is refused like it: a ``memory.path``
    elsewhere (the company's whole knowledge graph, writable through ``sandbox.write``), a
    backup routine's ``to`` (every store, in each archive) and ``$RUNTIME_DIRECTORY`` (the
    control socket, where a server would approve its own held calls). Each server is
    refused before it starts, with the path named.
    """
    kept = {name: tmp_path / name for name in ("brain", "backups", "run")}
    for where in kept.values():
        where.mkdir()
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(kept["run"]))
    servers = {
        "memory": {"command": "/bin/true", "sandbox": {"write": [str(kept["brain"])]}},
        "backups": {"command": "/bin/true", "sandbox": {"read": [str(kept["backups"])]}},
        "socket": {"command": "/bin/true", "sandbox": {"read": [str(kept["run"])]}},
    }
    cfg = write_company(
        tmp_path,
        {"marketing": {"mcp_servers": servers}},
        memory={"path": str(kept["brain"] / "memory.jsonl")},
        routines={"nightly": {"backup": {"every": "1d", "to": str(kept["backups"])}}},
    )
    with MessagesAPIServer(responder=PerAgent(marketing=[])) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            failed = await _wait_for(
                lambda: (e := d.bus.recent({"mcp_server_failed"}, limit=10)) and len(e) == 3 and e
            )
    reasons = {e.data["server"]: e.data["reason"] for e in failed}
    assert str(kept["brain"] / "memory.jsonl") in reasons["memory"], reasons
    assert str(kept["backups"]) in reasons["backups"], reasons
    assert str(kept["run"]) in reasons["socket"], reasons


@pytest.mark.anyio
@pytest.mark.parametrize("as_root", [None, False], ids=["as-the-daemon", "user-namespace"])
async def test_a_server_cannot_make_a_user_namespace_of_its_own(
    tmp_path: Path, as_root: bool | None
) -> None:
    """In a user namespace of its own the server would be root again: it could mount a
    fresh tmpfs (RAM no limit bounds) and reach the kernel's whole namespace surface, the
    usual way out of a container. Its threads and processes still start.
    """
    code = (
        "import ctypes, json, os, threading, subprocess\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "out = {}\n"
        "rc = libc.unshare(0x10000000)  # CLONE_NEWUSER\n"
        "out['user namespace'] = 'ok' if rc == 0 else os.strerror(ctypes.get_errno())\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "out['thread'] = 'ok'\n"
        "out['process'] = subprocess.run(['/bin/sh', '-c', 'echo ok'], capture_output=True,\n"
        "    text=True).stdout.strip()\n"
        "out['fds'] = sorted(os.listdir('/proc/self/fd'))\n"
        "print(json.dumps(out))\n"
    )
    found = await _run_in_sandbox(tmp_path, code, as_root=as_root)
    assert found.pop("thread") == found.pop("process") == "ok", found
    assert found.pop("fds") == ["0", "1", "2", "3"], found  # 3: the listing's own
    assert found == {"user namespace": "Operation not permitted"}


@pytest.mark.anyio
async def test_a_backup_directory_added_by_a_reload_is_refused_at_the_next_start(
    tmp_path: Path,
) -> None:
    """The refused paths follow company.yaml: a backup routine added by a reload protects
    its directory from the next start of a server (here the retry of one that failed).
    """
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    servers = {"late": {"command": "/bin/true", "sandbox": {"read": [str(shelf)]}}}
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": servers}})
    clock = ManualClock()
    with MessagesAPIServer(responder=PerAgent(marketing=[])) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            first = await _wait_for(lambda: d.bus.recent({"mcp_server_failed"}, limit=10))
            assert "closed the connection" in first[0].data["reason"]  # started: allowed
            write_company(
                tmp_path,
                {"marketing": {"mcp_servers": servers}},
                routines={"nightly": {"backup": {"every": "1d", "to": str(shelf)}}},
            )
            assert isinstance(await d.reload(), ReloadApplied)
            clock.advance(5)  # the retry
            failed = await _wait_for(
                lambda: (e := d.bus.recent({"mcp_server_failed"}, limit=10)) and len(e) > 1 and e
            )
    reasons = [e.data["reason"] for e in failed]
    assert any(f"would show {shelf}" in r for r in reasons), reasons


def test_servers_launched_together_all_start(tmp_path: Path) -> None:
    # Every agent's servers launch at once at the daemon's start, each in its own thread,
    # and the first launches write the seccomp filter file. They shared one temporary
    # name, so one launch's replace took the file from under another's: "No such file or
    # directory", and the agent ran without its tools (seen in CI).
    spec = McpServerSpec(command=sys.executable, args=("-c", "pass"))
    state = tmp_path / "state"
    state.mkdir()
    sandbox = ToolSandbox(state)
    asyncio.run(sandbox.launch("agent", "probe", spec))  # probed once: launches are quick
    tools = state / "tools"
    failed: list[BaseException] = []
    for _ in range(30):
        for leftover in tools.glob("*.bpf"):
            leftover.unlink()  # as on a fresh state directory
        together = threading.Barrier(6)

        def launch(i: int, together: threading.Barrier = together) -> None:
            together.wait(timeout=30)
            try:
                asyncio.run(sandbox.launch(f"agent{i}", "probe", spec))
            except BaseException as exc:  # collected, asserted below
                failed.append(exc)

        threads = [threading.Thread(target=launch, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert failed == []
    assert sorted(p.name for p in tools.iterdir() if p.is_file()) in (
        [],  # no seccomp on this machine: no filter file
        ["no-user-namespaces.bpf"],  # and no temporary file left behind
    )
