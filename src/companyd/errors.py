"""companyd's error taxonomy.

Three families, kept apart on purpose:

* :class:`ConfigError` — the operator's mistake in company.yaml (or on the command line).
  It carries every problem found, each with file, line, column and dotted path, and maps to
  exit code 78 (``EX_CONFIG``) so systemd does not restart-loop on it.
* :class:`CompanydError` subclasses raised at run time — a failure of the world (the API is
  down, the budget is spent, a file is unreadable). Supervisors and agents handle these.
* Control flow that goes back to a model (a tool error) is not an exception type here; it
  is a tool result with ``is_error`` set.

Every message follows one rule: quote the offending value with ``!r``, name what was
expected or the valid choices, and say what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from companyd._secrets import redact

__all__ = [
    "EX_CONFIG",
    "EX_PARTIAL",
    "EX_REFUSED",
    "EX_SOFTWARE",
    "EX_TEMPFAIL",
    "EX_UNAVAILABLE",
    "EX_USAGE",
    "CompanydError",
    "ConfigError",
    "ConfigIssue",
    "DaemonNotRunning",
    "StateLocked",
    "UnknownName",
    "UsageError",
]

#: Exit codes of every command (docs/daemon.md lists them all, with when each is used).
#: 1: the answer is "no" — an unknown agent, routine, task or proposal, a rejected reload,
#: an invalid company.yaml for a command that only checks it; the same in every command,
#: whether the daemon or the command itself found it.
EX_REFUSED = 1
#: 2: the command line is wrong (argparse's code): an unknown option, a bad value, the
#: config named twice differently.
EX_USAGE = 2
#: 3: the command was done only in part — a reload whose tree could not apply some of its
#: changes (an agent that failed to start): not a clean "yes" (0) nor a "no" (1, nothing
#: changed), so a deploy script can tell it apart.
EX_PARTIAL = 3
#: sysexits.h codes.
EX_CONFIG = 78
EX_SOFTWARE = 70
EX_TEMPFAIL = 75
EX_UNAVAILABLE = 69


class CompanydError(Exception):
    """Base of every error companyd raises on purpose."""


class ConfigIssue:
    """One problem in a configuration file (immutable; compared and hashed by value).

    Attributes:
        file: path of the file as the user gave it.
        line: 1-based line of the offending node, or 0 when the problem has no position
            (an empty file, an unreadable file).
        column: 1-based column, or 0.
        path: dotted path of the field, e.g. ``agents.cfo.budget.monthly_usd``; empty for
            document-level problems.
        message: what was expected, what was found and what to do.
        severity: ``"error"`` or ``"warning"``; warnings never fail validation.

    Written out rather than a frozen ``dataclass``: every command imports this module, and
    ``dataclasses`` (with ``inspect``) is ~9 ms of a ~13 ms interpreter start (issue 31).
    """

    __match_args__ = ()
    _FIELDS = ("file", "line", "column", "path", "message", "severity")

    file: str
    line: int
    column: int
    path: str
    message: str
    severity: str

    def __init__(
        self,
        *,
        file: str,
        line: int,
        column: int,
        path: str,
        message: str,
        severity: str = "error",
    ) -> None:
        # A config error quotes the value it rejects; when that value is (or holds) a
        # secret, the quote is masked here, once, for every path the issue travels
        # (stderr, --json, the reload reply, the "change rejected" alert, notify-failure).
        values = (file, line, column, redact(path), redact(message), severity)
        for name, value in zip(self._FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    def _key(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({inner})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a ConfigIssue is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a ConfigIssue is immutable")

    def __str__(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}:{self.column}" if self.column else f":{self.line}"
        prefix = "warning: " if self.severity == "warning" else ""
        if self.path:
            return f"{where}: {prefix}{self.path}: {self.message}"
        return f"{where}: {prefix}{self.message}"


class ConfigError(CompanydError):
    """company.yaml (or another operator-written input) is invalid.

    ``issues`` holds every error found, in file order; ``str()`` is one line per issue.
    """

    exit_code = EX_CONFIG

    def __init__(self, issues: Iterable[ConfigIssue]) -> None:
        self.issues: Sequence[ConfigIssue] = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class UsageError(CompanydError):
    """The command line is wrong in a way argparse cannot see; exit 2 (:data:`EX_USAGE`)."""

    exit_code = EX_USAGE


class UnknownName(CompanydError):
    """A command names an agent (routine, …) that does not exist; exit 1 (:data:`EX_REFUSED`).

    ``code`` is what ``--json`` reports (``"unknown_agent"``).
    """

    exit_code = EX_REFUSED

    def __init__(self, message: str, code: str = "unknown_agent") -> None:
        super().__init__(message)
        self.code = code


class StateLocked(CompanydError):
    """Another companyd daemon holds the lock on this state directory: ``holder`` its pid
    (None while it starts), ``directory`` the state directory.
    """

    def __init__(self, message: str, *, holder: int | None = None, directory: str = "") -> None:
        super().__init__(message)
        self.holder = holder
        self.directory = directory


class DaemonNotRunning(CompanydError):
    """No daemon answers on the control socket."""
