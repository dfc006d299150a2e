"""Many companies on one host: two ``companyd@NAME`` daemons, each reached by its own
``--config`` and never by the other's, nor by the single unit's socket.

The daemons are real subprocesses laid out as the template lays them out, under a temporary
root instead of ``/``: ``etc/companyd/NAME/company.yaml``, ``--state-dir
var/lib/companyd/NAME`` and ``$RUNTIME_DIRECTORY=run/companyd/NAME`` (so the control socket
is ``run/companyd/NAME/companyd.sock``); a third daemon is ``companyd.service``
(``etc/companyd/company.yaml``, ``run/companyd/companyd.sock``).

Under systemd root's CLI does not believe a daemon's company.yaml claim (an abstract socket
held by the unit's dynamic user, daemon/_lock.py), so the socket must be found from the
layout alone. Here every process is root; the CLI runs with ``unshare --net`` — a network
namespace of its own, where no abstract socket of the daemons is visible but their sockets
on disk are — which takes the claim away just the same. The CLI process is told the
temporary root by replacing ``companyd.daemon._layout.SYSTEMD_LAYOUT`` before ``main`` runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.daemon._control_client import candidate_sockets
from companyd.daemon._layout import SystemdLayout
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess

# main() with the layout rooted at argv[1:4] (the control client reads the layout module's
# SYSTEMD_LAYOUT when it needs it), then the companyd command in argv[4:]
CLI = (
    "import sys; from pathlib import Path; import companyd.daemon._layout as lay; "
    "lay.SYSTEMD_LAYOUT = lay.SystemdLayout(*(Path(p) for p in sys.argv[1:4])); "
    "from companyd.cli._main import main; sys.exit(main(sys.argv[4:]))"
)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_unshare = pytest.mark.skipif(
    not _can_unshare(),
    reason="`unshare --net` is not permitted here (needs root or user namespaces): without "
    "it the CLI would find the daemons through their company.yaml claim, not the layout",
)


def company(name: str) -> dict[str, Any]:
    return {
        "schema": "companyd/v1",
        "company": {"name": name, "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {"ceo": {"title": "CEO", "instructions": "You are the ceo."}},
    }


@pytest.fixture
def root() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def layout_of(root: Path) -> SystemdLayout:
    return SystemdLayout(root / "etc/companyd", root / "var/lib/companyd", root / "run/companyd")


def daemon(root: Path, instance: str | None, name: str) -> DaemonProcess:
    """A daemon where companyd@INSTANCE (or, with None, companyd.service) would run it."""
    layout = layout_of(root)
    if instance is None:
        config, state, runtime = (
            layout.config_root / "company.yaml",
            layout.state_root,
            layout.runtime_root,
        )
    else:
        config = layout.config_path(instance)
        state, runtime = layout.state_dir(instance), layout.runtime_root / instance
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(company(name), sort_keys=False), encoding="utf-8")
    runtime.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RUNTIME_DIRECTORY": str(runtime), "STATE_DIRECTORY": str(state)}
    log = root / f"{instance or 'single'}.log"
    return DaemonProcess(config, state, log=log, env=env)


async def companyd(root: Path, *argv: str) -> tuple[int, str, str]:
    layout = layout_of(root)
    env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "STATE_DIRECTORY")}
    proc = await asyncio.create_subprocess_exec(
        "unshare", "--net", sys.executable, "-c", CLI,
        str(layout.config_root), str(layout.state_root), str(layout.runtime_root), *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@needs_unshare
@pytest.mark.anyio
async def test_two_instances_are_each_reached_by_their_own_config_only(root: Path) -> None:
    layout = layout_of(root)
    alpha, beta = daemon(root, "alpha", "Alpha Co"), daemon(root, "beta", "Beta Co")
    single = daemon(root, None, "Single Co")
    daemons = (alpha, beta, single)
    try:
        await asyncio.gather(*(d.start() for d in daemons))
        for d, instance, name in ((alpha, "alpha", "Alpha Co"), (beta, "beta", "Beta Co")):
            rc, out, err = await companyd(
                root, "status", "--json", "--config", str(layout.config_path(instance))
            )
            assert rc == 0, err
            status = json.loads(out)
            assert status["company"]["name"] == name
            assert status["daemon"]["pid"] == d.pid
            assert status["daemon"]["socket"] == str(layout.socket(instance))
            assert status["daemon"]["state_dir"] == str(layout.state_dir(instance))
        # the single unit's company.yaml still finds the single unit's socket
        rc, out, err = await companyd(
            root, "status", "--json", "--config", str(layout.config_root / "company.yaml")
        )
        assert rc == 0, err
        assert json.loads(out)["company"]["name"] == "Single Co"

        # beta stopped: its --config says so; it never answers with another company
        assert await beta.stop() == 0
        rc, out, err = await companyd(root, "status", "--config", str(layout.config_path("beta")))
        assert rc == 69, out + err
        assert "Single Co" not in out and "Alpha Co" not in out
        assert str(layout.socket("beta")) in err
        assert str(layout.single_socket) not in err
        assert "systemctl start companyd@beta" in err
    finally:
        for d in daemons:
            if d.proc is not None and d.proc.returncode is None:
                await d.stop()


def test_an_instance_config_leads_to_its_runtime_socket_and_never_the_single_one(
    tmp_path: Path,
) -> None:
    layout = layout_of(tmp_path)
    acme = layout.config_path("acme")
    paths = candidate_sockets(config=acme, env={}, layout=layout)
    assert paths[0] == tmp_path / "run/companyd/acme/companyd.sock"
    assert layout.single_socket not in paths
    assert layout.socket("acme") not in candidate_sockets(
        config=layout.config_path("other"), env={}, layout=layout
    )
    # not an instance: companyd.service's file, a file elsewhere, a name the unit refuses
    for config in (
        layout.config_root / "company.yaml",
        tmp_path / "acme" / "company.yaml",
        layout.config_root / "Not.Valid" / "company.yaml",
        layout.config_root / "acme" / "other.yaml",
    ):
        assert layout.instance_of(config) is None, config
        assert candidate_sockets(config=config, env={}, layout=layout)[-1] == layout.single_socket
    # a symlink into the layout counts as the file it points to
    link = tmp_path / "acme.yaml"
    acme.parent.mkdir(parents=True)
    acme.write_text("schema: companyd/v1\n")
    link.symlink_to(acme)
    assert layout.instance_of(link) == "acme"
