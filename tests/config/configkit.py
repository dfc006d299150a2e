"""Helpers for the config tests: the example company, a minimal company.yaml, loading
text and collecting its errors.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from companyd.config import CompanyConfig, load_config_text
from companyd.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "company.yaml"

MINIMAL = """\
schema: companyd/v1
company:
  name: Acme
  budget: {daily_usd: 5}
agents:
  ceo:
    title: CEO
    instructions: Lead.
  cfo:
    title: CFO
    reports_to: ceo
    instructions: Count.
"""


def load(text: str, base: Path | None = None) -> CompanyConfig:
    return load_config_text(textwrap.dedent(text), file="c.yaml", base_dir=base)


def errors(text: str, base: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text, base)
    return [str(i) for i in info.value.issues]
