"""``companyd migrate``: bring company.yaml to the current format (docs/upgrade.md).

``--check`` (the default) prints what would change and exits 1 when something would, 0
when the file is current; ``--write`` keeps ``company.yaml.bak`` and rewrites the file
atomically, comments kept. A file in a newer format, or one that does not parse, exits 78
with what to do — as ``run`` does for the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from companyd.cli._main import print_json
from companyd.config import (
    MigrationRefused,
    default_config_path,
    migration_problems,
    plan_migration,
    write_migration,
)
from companyd.errors import EX_REFUSED

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``migrate``."""
    p = sub.add_parser(
        "migrate",
        help="rewrite an older company.yaml in the current format (keeps a .bak)",
        description="Bring company.yaml to the current format (schema: companyd/vN): apply "
        "the format steps from its version and write deprecated spellings (reportsTo, "
        "cronExpression, llm, ...) as their canonical keys. Comments and layout are kept. "
        "--check (the default) only says what would change (exit 1 if anything would); "
        "--write keeps the original as company.yaml.bak and replaces the file atomically.",
    )
    p.add_argument("--config", type=Path, help="company.yaml (default: $COMPANYD_CONFIG, …)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="say what would change (default)")
    mode.add_argument("--write", action="store_true", help="rewrite the file, keeping a .bak")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    path: Path = args.config or default_config_path()
    try:
        plan = plan_migration(path)
        bak = write_migration(plan) if args.write else None
    except MigrationRefused as exc:
        print(f"companyd: {exc}", file=sys.stderr)
        if args.json:
            print_json({"ok": False, "error": str(exc), "code": "refused"})
        return exc.exit_code
    if args.json:
        out = plan.to_dict()
        out["written"] = bak is not None
        out["backup"] = None if bak is None else str(bak)
        print_json(out)
    elif not plan.needed:
        print(f"{path}: already in the current format (companyd/v{plan.target}); nothing to do")
    else:
        verb = "migrated" if bak is not None else "would migrate"
        what = (
            f"companyd/v{plan.version} → companyd/v{plan.target}"
            if plan.version != plan.target
            else f"format companyd/v{plan.target}: deprecated spellings"
        )
        print(f"{path}: {verb} ({what}):")
        for change in plan.changes:
            print(f"  {change}")
        problems = None if bak is not None else migration_problems(plan)
        if bak is not None:
            print(f"the original is kept as {bak}")
        elif problems is not None:
            # --write would refuse: say so now, not after the founder runs it
            print(
                "but the file has other problems, which --write would refuse over (fix them "
                f"first; they are not migration problems):\n{problems}"
            )
        else:
            print(f"run `companyd migrate --write --config {path}` to rewrite it (keeps a .bak)")
    if plan.needed and bak is None:
        return EX_REFUSED
    return 0
