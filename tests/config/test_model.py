"""The resolved view (config/model.py): paths resolve against company.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.config import load_config

from .configkit import MINIMAL

# -- resolution of paths ---------------------------------------------------------------


def test_state_dir_and_memory_path_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "company.yaml"
    f.write_text(MINIMAL + "state_dir: var\nmemory: {path: kg/memory.jsonl}\n", encoding="utf-8")
    cfg = load_config(f)
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert cfg.state_dir() == tmp_path / "var"
    assert cfg.state_dir("/srv/x") == Path("/srv/x")
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/companyd:/other")
    assert cfg.state_dir() == Path("/var/lib/companyd")
    assert cfg.memory_path(cfg.state_dir()) == tmp_path / "kg" / "memory.jsonl"
