"""Where company.yaml is when no command line names it.

A module of its own, importing nothing but the standard library: every command of the CLI
asks for it, most of them without loading the config (pydantic and the schema, ~0.3 s of
imports).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_STATE_DIR", "default_config_path"]

#: The state directory when nothing else names one: ``state`` next to company.yaml.
DEFAULT_STATE_DIR = "state"


def default_config_path() -> Path:
    """company.yaml to use when none is given: ``$COMPANYD_CONFIG``, then
    ``$CONFIGURATION_DIRECTORY/company.yaml`` (systemd), then ``./company.yaml``.
    """
    env = os.environ.get("COMPANYD_CONFIG")
    if env:
        return Path(env)
    conf_dir = os.environ.get("CONFIGURATION_DIRECTORY")
    if conf_dir:
        return Path(conf_dir.split(":")[0]) / "company.yaml"
    return Path("company.yaml")
