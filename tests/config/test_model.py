"""The resolved view (config/_model.py): paths resolve against company.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.config import load_config

from .configkit import MINIMAL, errors, load

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


# -- where a routine's result goes -----------------------------------------------------

ROUTINES = """\
routines:
  post:
    assignee: ceo
    description: Write the post.
    expected_output: The post.
    trigger: {cron: "0 14 * * *"}
  pulse:
    assignee: ceo
    description: Look around.
    trigger: {every: 5m}
  books:
    assignee: cfo
    description: Close the books.
    expected_output: A summary.
    trigger: {cron: "0 8 1 * *"}
    deliver: [digest, file, memory]
alerts: {digest_at: "07:30"}
"""


def test_deliveries_default_to_telegram_only_with_an_expected_output() -> None:

    cfg = load(MINIMAL + ROUTINES)
    assert cfg.routines["post"].deliver == ("telegram",)
    assert cfg.routines["pulse"].deliver == ()  # the heartbeat stays quiet
    assert cfg.routines["books"].deliver == ("digest", "file", "memory")
    assert cfg.spec.alerts.digest_at == "07:30"


def test_a_wrong_delivery_or_digest_time_is_refused_with_the_choices() -> None:

    found = errors(
        MINIMAL
        + ROUTINES.replace("[digest, file, memory]", "[email, file, file]").replace('"07:30"', "7")
    )
    text = "\n".join(found)
    assert "routines.books.deliver" in text and "'email'" in text
    assert "telegram" in text and "digest" in text  # the valid choices
    assert 'write "07:00"' in text
