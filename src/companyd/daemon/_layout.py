"""Where the shipped systemd units keep a company, so the CLI can find what a unit made.

``companyd.service`` (one company): ``/etc/companyd/company.yaml``, state in
``/var/lib/companyd``, control socket ``/run/companyd/companyd.sock``.

``companyd@NAME.service`` (one of many companies, the instance NAME being the company):
``/etc/companyd/NAME/company.yaml``, ``/var/lib/companyd/NAME``,
``/run/companyd/NAME/companyd.sock`` — the unit's ``ConfigurationDirectory=``,
``StateDirectory=`` and ``RuntimeDirectory=`` are ``companyd/%i``. Two instances never
share a directory or a socket because NAME differs; :func:`instance_name_problem` says which
NAMEs the unit accepts.

A command given ``--config /etc/companyd/NAME/company.yaml`` is about instance NAME
(:meth:`SystemdLayout.instance_of`): its daemon listens in ``/run/companyd/NAME``, and never
in the single unit's ``/run/companyd`` (that would be another company).
:data:`SYSTEMD_LAYOUT` is the layout of the shipped units; tests give another root.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from companyd.daemon._protocol import SOCKET_NAME

__all__ = [
    "INSTANCE_NAME_MAX",
    "SYSTEMD_LAYOUT",
    "SystemdLayout",
    "instance_name_problem",
]

#: The longest instance name: the unit runs as the dynamic user ``companyd-NAME``, and
#: systemd's strict user names have at most 31 characters.
INSTANCE_NAME_MAX = 22
_INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
#: The file name the template's ``ExecStart=`` runs.
CONFIG_NAME = "company.yaml"


def instance_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a ``companyd@NAME`` instance (a sentence quoting it), or None.

    Accepted: lower-case letters, digits, ``-`` and ``_``, starting with a letter or digit,
    at most :data:`INSTANCE_NAME_MAX` characters. Such a name needs no ``systemd-escape``,
    is the same in every specifier (``%i`` = ``%I``), is a valid path component and makes a
    valid user name ``companyd-NAME``.
    """
    if not _INSTANCE_NAME.fullmatch(name):
        return (
            f"the company name {name!r} cannot be a systemd instance name: use lower-case "
            "letters, digits, '-' and '_', starting with a letter or digit (e.g. 'acme' or "
            "'bakery-berlin')"
        )
    if len(name) > INSTANCE_NAME_MAX:
        return (
            f"the company name {name!r} is {len(name)} characters long; at most "
            f"{INSTANCE_NAME_MAX} fit the unit's user name companyd-NAME (31 characters), "
            "so choose a shorter one"
        )
    return None


@dataclass(frozen=True)
class SystemdLayout:
    """The three roots of the shipped units; every path below is derived from them.

    Attributes:
        config_root: ``/etc/companyd`` (``ConfigurationDirectory=``).
        state_root: ``/var/lib/companyd`` (``StateDirectory=``).
        runtime_root: ``/run/companyd`` (``RuntimeDirectory=``).
    """

    config_root: Path = Path("/etc/companyd")
    state_root: Path = Path("/var/lib/companyd")
    runtime_root: Path = Path("/run/companyd")

    @property
    def single_socket(self) -> Path:
        """``companyd.service``'s control socket."""
        return self.runtime_root / SOCKET_NAME

    def config_path(self, instance: str) -> Path:
        """``/etc/companyd/NAME/company.yaml``."""
        return self.config_root / instance / CONFIG_NAME

    def state_dir(self, instance: str) -> Path:
        """``/var/lib/companyd/NAME``."""
        return self.state_root / instance

    def socket(self, instance: str) -> Path:
        """``/run/companyd/NAME/companyd.sock``."""
        return self.runtime_root / instance / SOCKET_NAME

    def instance_of(self, config: str | os.PathLike[str]) -> str | None:
        """The instance NAME when ``config`` is ``<config_root>/NAME/company.yaml`` with a
        valid NAME (as written, or with symlinks resolved), else None. Pure path work.
        """
        for path in (Path(os.path.abspath(config)), Path(os.path.realpath(config))):
            parent = path.parent
            if (
                path.name == CONFIG_NAME
                and parent.parent == self.config_root
                and instance_name_problem(parent.name) is None
            ):
                return parent.name
        return None


SYSTEMD_LAYOUT = SystemdLayout()
