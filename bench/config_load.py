"""How long `companyd validate` takes, against a plain ``yaml.safe_load`` of the same text.

Reports, for the example company.yaml and for a generated company of 200 agents and 200
routines, the median time of ``load_config_text`` (parse with positions, schema, secret
scan, cross-checks, resolution) and the median ratio to ``yaml.safe_load`` of the same text,
each pair timed back to back (the machine is shared and noisy; the ratio is the stable
figure). Also the time for a
file with an error in every agent (the error path formats messages and suggestions).

Run: .venv/bin/python bench/config_load.py
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from companyd.config import load_config_text
from companyd.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def big_company(n: int, *, broken: bool = False) -> str:
    lines = [
        "schema: companyd/v1",
        "company:",
        "  name: Big",
        "  budget: {daily_usd: 100, monthly_usd: 2000}",
        "departments:",
    ]
    lines += [f"  dept-{d}: {{title: Dept {d}}}" for d in range(10)]
    lines.append("agents:")
    for i in range(n):
        lines += [
            f"  agent-{i}:",
            f"    title: Agent {i}",
            f"    instructions: Do the work of agent {i} and report.",
            f"    department: dept-{i % 10}",
            f"    budget: {{daily_usd: {'lots' if broken else 1}}}",
        ]
        if i:
            lines.append(f"    reports_to: agent-{(i - 1) // 3}")
    lines.append("routines:")
    for i in range(n):
        lines += [
            f"  routine-{i}:",
            f"    assignee: agent-{i}",
            "    description: Check in.",
            f'    trigger: {{cron: "{i % 60} {i % 24} * * mon-fri"}}',
        ]
    return "\n".join(lines) + "\n"


def paired(base: Callable[[], object], full: Callable[[], object], repeat: int) -> list[float]:
    """Median baseline time, median measured time and median of per-pair ratios. Each
    repetition times both back to back, so load on the shared machine hits both alike.
    """
    base()
    full()  # warm caches (zone list, imports)
    bases, fulls, ratios = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        base()
        t1 = time.perf_counter()
        full()
        t2 = time.perf_counter()
        bases.append(t1 - t0)
        fulls.append(t2 - t1)
        ratios.append((t2 - t1) / (t1 - t0))
    return [statistics.median(x) for x in (bases, fulls, ratios)]


def validate(text: str) -> None:
    with contextlib.suppress(ConfigError):  # the error path is timed too
        load_config_text(text, file="company.yaml", base_dir=ROOT)


def main() -> None:
    cases = {
        "example company.yaml (8 agents, 4 routines)": (ROOT / "company.yaml").read_text(),
        "200 agents + 200 routines": big_company(200),
        "200 agents + 200 routines, 200 errors": big_company(200, broken=True),
    }
    print(f"machine: {platform.node()} {platform.machine()}, Python {platform.python_version()}")
    print(f"{'case':45} {'safe_load':>10} {'validate':>10} {'ratio':>6}")
    for name, text in cases.items():
        repeat = 31 if len(text) < 20_000 else 11
        base, full, ratio = paired(
            lambda t=text: yaml.safe_load(t), lambda t=text: validate(t), repeat
        )
        print(f"{name:45} {base * 1e3:8.1f}ms {full * 1e3:8.1f}ms {ratio:5.2f}x")


if __name__ == "__main__":
    main()
