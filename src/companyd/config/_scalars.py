"""The scalar types of company.yaml: durations, amounts, rates, model ids, names.

Each is an ``Annotated`` type whose validators accept exactly the documented spellings and
refuse, with a message naming the accepted forms, what YAML would otherwise turn into a
surprise (``yes`` as 1, ``.inf``, NaN). :mod:`companyd.config._schema` builds on them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

__all__ = [
    "CredentialName",
    "Duration",
    "EnvName",
    "ModelId",
    "PositiveInt",
    "PositiveUSD",
    "Rate",
    "Text",
    "bare_model_id",
    "http_url",
    "is_loopback",
    "listen_address",
    "number",
    "parse_duration",
    "whole",
]


_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([smhd])\s*)+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_FORMS = "a duration such as 30s, 5m, 1h30m or 1d (or a number of seconds)"
_MAX_DURATION = 366 * 86400.0


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90"``, ``"90s"``, ``"5m"``, ``"1h30m"`` or ``"2d"``.

    Units: ``s`` seconds, ``m`` minutes, ``h`` hours, ``d`` days; parts add up. Booleans,
    infinities and NaN are refused (YAML reads ``yes`` and ``.inf`` as values).

    Raises:
        ValueError: with a message naming the accepted forms and quoting the value.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {_DURATION_FORMS}, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite {_DURATION_FORMS[2:]}, got {value!r}")
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\d+(?:\.\d+)?", value.strip()):
        seconds = float(value.strip())
    elif isinstance(value, str) and _DURATION_RE.match(value):
        seconds = sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value))
    else:
        raise ValueError(f"expected {_DURATION_FORMS}, got {value!r}")
    if seconds > _MAX_DURATION:
        # Far beyond any sensible interval; larger values overflow the scheduler's dates.
        raise ValueError(f"expected a duration of at most 366d, got {value!r}")
    return seconds


def number(value: Any) -> Any:
    """Before-validator of numbers: a boolean is refused, anything else passes on."""
    # YAML 1.1 reads yes/no/on/off as booleans and Python counts True as 1: refuse them so
    # `daily_usd: yes` is an error rather than a one-dollar budget.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return value


def whole(value: Any) -> Any:
    """Before-validator of whole numbers: a boolean is refused, anything else passes on."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
PositiveUSD = Annotated[float, BeforeValidator(number), Field(gt=0, allow_inf_nan=False)]
Rate = Annotated[float, BeforeValidator(number), Field(ge=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, BeforeValidator(whole), Field(gt=0)]
Text = Annotated[str, Field(min_length=1)]


def bare_model_id(value: Any) -> Any:
    """A model id without the ``anthropic/`` provider prefix."""
    # "anthropic/claude-x" is the provider/model spelling peers use; only Anthropic is served.
    if isinstance(value, str) and value.startswith("anthropic/"):
        return value.removeprefix("anthropic/")
    return value


ModelId = Annotated[str, BeforeValidator(bare_model_id), Field(min_length=1)]


def http_url(value: str | None) -> str | None:
    """Field validator: ``value`` unchanged if it is an http(s) URL (or None)."""
    if value is not None and not re.fullmatch(r"https?://[^\s/?#]+(?:[/?#]\S*)?", value):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(
            "expected the name of an environment variable (letters, digits and '_', not "
            f"starting with a digit), got {value!r}; the value itself goes in that variable"
        )
    return value


def _credential_name(value: str) -> str:
    if not value or "/" in value or value in (".", "..") or not value.isprintable():
        raise ValueError(
            "expected the name of a systemd credential (a file name in "
            f"$CREDENTIALS_DIRECTORY, without '/'), got {value!r}"
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
CredentialName = Annotated[str, AfterValidator(_credential_name)]


def listen_address(value: str) -> tuple[str, int]:
    """The one reading of a ``listen`` address (``metrics.listen``, ``dashboard.listen``):
    ``"127.0.0.1:9464"``, ``"[::1]:9464"``, ``"localhost:9464"`` or ``":9464"`` (=
    127.0.0.1) → (IP address, port). Port 0 picks a free port (tests). Whether the address
    may face the network is the caller's rule (:func:`is_loopback`).

    Raises:
        ValueError: not ``HOST:PORT``, a port outside 0-65535, or a host that is not an IP
            address (a name would resolve differently over time), naming the expected form.
    """
    text = value.strip()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"expected [IPV6]:PORT such as '[::1]:9464', got {value!r}")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"expected HOST:PORT such as '127.0.0.1:9464', got {value!r}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"expected a port number 0-65535 after the colon, got {value!r}")
    if host in ("", "localhost"):
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"host {host!r} is not an IP address; use an address such as 127.0.0.1 or ::1"
        ) from None
    return str(address), int(port_text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address from :func:`listen_address`) is a loopback address."""
    return ipaddress.ip_address(host).is_loopback
