"""``dashboard:`` in company.yaml: on by default on loopback; a non-loopback address only
with TLS or behind a proxy; the one listen parser shared with ``metrics.listen``.
"""

from __future__ import annotations

import pytest

from companyd.config import listen_address, load_config_text
from companyd.errors import ConfigError

BASE = """\
schema: companyd/v1
company: {name: Acme, budget: {daily_usd: 5}}
agents:
  ceo: {title: CEO, instructions: Lead.}
"""


def test_on_by_default_on_loopback() -> None:
    spec = load_config_text(BASE).spec.dashboard
    assert spec.enabled and spec.listen == "127.0.0.1:8470"
    assert not spec.behind_proxy and spec.tls_cert is None


@pytest.mark.parametrize(
    "extra",
    [
        'dashboard: {listen: "0.0.0.0:8470", behind_proxy: true}',
        'dashboard: {listen: "[::]:443", tls_cert: a.crt, tls_key: a.key}',
        'dashboard: {listen: "[::1]:0"}',
        "dashboard: {enabled: false}",
    ],
)
def test_accepted(extra: str) -> None:
    load_config_text(BASE + extra + "\n")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'dashboard: {listen: "192.168.1.5:8470"}',
            "dashboard.listen: refusing to serve the dashboard on '192.168.1.5:8470': "
            "192.168.1.5 is not a loopback address",
        ),
        (
            "dashboard: {tls_cert: a.crt}",
            "expected both tls_cert and tls_key",
        ),
        ('dashboard: {listen: "dash.example.com:80"}', "host 'dash.example.com' is not an IP"),
        ('dashboard: {listen: "127.0.0.1"}', "expected HOST:PORT such as '127.0.0.1:9464'"),
    ],
)
def test_refused_with_the_field_and_what_to_do(extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(BASE + extra + "\n")
    text = str(info.value)
    assert "company.yaml:5:" in text and message in text


def test_one_listen_parser() -> None:
    assert listen_address(":8470") == ("127.0.0.1", 8470)
    assert listen_address("localhost:0") == ("127.0.0.1", 0)
    assert listen_address("[::1]:9") == ("::1", 9)
