"""Loading company.yaml: the entry points.

:func:`load_config` reads the file (a regular file of bounded size, UTF-8) and
:func:`load_config_text` validates text: YAML with positions (:mod:`.yaml`), accepted
spellings made canonical (:mod:`.tree`), then three independent passes over whatever
parsed — the secret scan (:mod:`.secrets`), the pydantic schema (:mod:`.schema`, its
errors worded by :mod:`.wording`) and the cross-checks (:mod:`.checks`) — so one run
reports every problem; a file without errors is resolved (:mod:`.model`).
:func:`default_config_path` says which file to read when none is given.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from companyd import __version__
from companyd._fs import FileTooLarge, NotRegularFile, read_regular_file
from companyd.config._checks import check_budgets_cover_a_call, check_colleague_waits, cross_check
from companyd.config._default_path import default_config_path
from companyd.config._model import CompanyConfig, resolve
from companyd.config._report import Positions, Report
from companyd.config._schema import SCHEMA, SCHEMA_VERSION, CompanyFile
from companyd.config._secrets import check_secrets, register_secrets
from companyd.config._tree import canonicalize
from companyd.config._wording import describe, schema_issues
from companyd.config._yaml import Empty, Failed, compose
from companyd.errors import ConfigError, ConfigIssue

__all__ = ["default_config_path", "load_config", "load_config_text"]

_MB = 1024 * 1024
#: Far above any real company.yaml (the example is 8 kB); refuses /dev/zero or a log file
#: given by mistake before it is read into memory.
_MAX_FILE_BYTES = 10 * _MB


def load_config(path: str | os.PathLike[str]) -> CompanyConfig:
    """Read, validate and resolve a company.yaml.

    Blocking file I/O: async callers use ``await asyncio.to_thread(load_config, path)``.

    Returns:
        the resolved config; its ``warnings`` hold non-fatal findings (deprecated
        spellings, unknown model ids).

    Raises:
        ConfigError: listing every error found, sorted by position. Problems inside the
            file carry a line and column; an unreadable file has line 0.
    """
    p = Path(path)
    file = str(path)
    register_secrets(None)

    def fail(message: str, line: int = 0, column: int = 0) -> ConfigError:
        return ConfigError(
            [ConfigIssue(file=file, line=line, column=column, path="", message=message)]
        )

    try:
        raw = read_regular_file(p, _MAX_FILE_BYTES)
    except FileTooLarge:
        raise fail(
            f"expected a company.yaml of at most {_MAX_FILE_BYTES // _MB} MB, got a larger "
            "file; check that the path names your company.yaml"
        ) from None
    except FileNotFoundError:
        raise fail(
            "file not found; create one with `companyd init` or give the path to your company.yaml"
        ) from None
    except IsADirectoryError:
        raise fail(
            "expected a file, got a directory; give the path to company.yaml inside it"
        ) from None
    except NotRegularFile as exc:
        raise fail(
            f"expected a regular file, got {exc.kind}; give the path to your company.yaml "
            "(companyd never reads a pipe or a device as its configuration)"
        ) from None
    except OSError as exc:
        raise fail(f"cannot read the file: {exc.strerror or exc}; check its permissions") from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise fail(f"cannot use this path: {exc}") from None
    # Relative paths resolve against the directory that really holds the file: a symlinked
    # company.yaml (or a symlinked directory) names the same company, state and prompts as
    # the file itself. ``path`` stays the path given (a reload reads it again).
    real_dir = Path(os.path.realpath(p)).parent
    loaded = load_config_text(_decode(raw, file), file=file, base_dir=real_dir)
    config = dataclasses.replace(loaded, path=p.absolute())
    # Every secret the file names is known to the redactor from here on, whichever command
    # loaded it (the daemon at start and on reload, the CLI, notify-failure).
    register_secrets(config)
    return config


def _decode(raw: bytes, file: str) -> str:
    """UTF-8 text of ``raw`` (a leading BOM is dropped), or ConfigError naming every line
    that holds a byte that is not UTF-8, at the column of its first bad byte.
    """
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    issues: list[ConfigIssue] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            col = len(line[: exc.start].decode("utf-8", errors="replace")) + 1
            issues.append(
                ConfigIssue(
                    file=file,
                    line=lineno,
                    column=col,
                    path="",
                    message=(
                        f"expected UTF-8 text, got the byte {line[exc.start]:#04x}; save the "
                        "file as UTF-8 (in most editors: 'Save with encoding')"
                    ),
                )
            )
            if len(issues) == 20:
                break
    if not issues and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        issues.append(
            ConfigIssue(
                file=file,
                line=1,
                column=1,
                path="",
                message="expected UTF-8 text, got UTF-16; save the file as UTF-8",
            )
        )
    raise ConfigError(issues)


def load_config_text(
    text: str, *, file: str = "company.yaml", base_dir: Path | None = None
) -> CompanyConfig:
    """Validate and resolve company.yaml contents given as text.

    Args:
        text: the YAML document.
        file: the name to use in messages.
        base_dir: directory relative paths (instructions_file, memory.path) resolve against;
            the current directory when None.

    Raises:
        ConfigError: listing every error found, sorted by position.
    """
    base = (base_dir or Path.cwd()).absolute()
    pos = Positions()
    rep = Report(file, pos)
    data = compose(text, rep)
    if data is Empty:
        rep.add(
            (),
            "expected a mapping with at least 'company' and 'agents', got an empty file; run "
            "`companyd init` for a commented starter",
            at=(1, 1),
        )
    elif data is not Failed and not isinstance(data, dict):
        rep.add(
            (),
            f"expected a mapping (key: value) at the top level, got {describe(data, (), pos)}; "
            "company.yaml starts with keys such as 'company:' and 'agents:'",
            at=pos.of(()),
        )
    if not isinstance(data, dict):
        raise ConfigError(rep.errors())

    _refuse_newer_schema(data, rep)
    data = canonicalize(data, CompanyFile, (), rep)
    check_secrets(data, rep)
    spec: CompanyFile | None = None
    try:
        spec = CompanyFile.model_validate(data)
    except ValidationError as exc:
        schema_issues(exc, data, rep)
    instructions = cross_check(data, rep, base)
    errors = rep.errors()
    if errors or spec is None:
        if not errors:  # every schema error sat under a path already explained
            rep.add((), "the file is invalid; fix the errors above")
        raise ConfigError(rep.errors())
    check_colleague_waits(spec, rep)
    check_budgets_cover_a_call(spec, rep)
    return resolve(spec, base / Path(file).name, text, tuple(rep.warnings()), instructions)


_SCHEMA_NAME = re.compile(r"companyd/v(\d{1,6})")


def _refuse_newer_schema(data: dict[str, Any], rep: Report) -> None:
    """A ``schema:`` newer than this code's is a file written for a newer companyd: say so,
    with the way back, instead of "did you mean companyd/v1" (which would lose its meaning).
    """
    value = data.get("schema")
    match = _SCHEMA_NAME.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) <= SCHEMA_VERSION:
        return
    rep.add(
        ("schema",),
        f"{value!r} is the format of a newer companyd (this one, {__version__}, reads up to "
        f"{SCHEMA!r}); upgrade companyd to the version that wrote it, or put back the file "
        "from before that upgrade (company.yaml.bak from `companyd migrate --write`, or "
        "config/company.yaml inside the pre-upgrade backup in <state>/backups) — "
        "docs/upgrade.md",
    )
    rep.settle(("schema",))
