"""``companyd doctor`` checks each of ``alerts.channels`` and ``alerts.webhooks`` (issue 30):
its variable set (the value never shown), and with ``--send-test`` a test message through
Apprise to a real SMTP server and a JSON endpoint on loopback, and a signed test event to a
webhook receiver that verifies it with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from companyd.cli import main
from companyd.ops._checks import Check
from companyd.ops._doctor import DoctorReport, run_doctor
from companyd.testing.smtp import SmtpSink, text_of
from companyd.testing.webhook_receiver import WebhookReceiver

from .opskit import env, write_company

NO_SYSTEMD = Path("/nonexistent/run/systemd/system")
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SMTP_PASSWORD = "smtp-pass-doctor-4d5e6f"
JSON_TOKEN = "json-token-doctor-7a8b9c"


def alerts(hook_url: str) -> dict[str, Any]:
    return {
        "alerts": {
            "channels": [
                {"name": "email", "url_env": "EMAIL_URL"},
                {"name": "ops", "url_env": "OPS_URL", "deliver": True},
            ],
            "webhooks": [
                {
                    "name": "crm",
                    "url": hook_url,
                    "secret_env": "CRM_SECRET",
                    "events": ["run.failed"],
                }
            ],
        }
    }


def checks(report: DoctorReport) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


@pytest.mark.anyio
async def test_unset_variables_are_problems_and_no_secret_is_shown(tmp_path: Path) -> None:
    config = write_company(tmp_path, **alerts("http://127.0.0.1:9/hook"))
    environ = env("http://127.0.0.1:9") | {"OPS_URL": f"json://127.0.0.1:9/x?t={JSON_TOKEN}"}
    report = await run_doctor(config, offline=True, environ=environ, systemd_runtime=NO_SYSTEMD)
    c = checks(report)
    assert c["channel:email"].status == "problem"
    assert "$EMAIL_URL is not set" in c["channel:email"].summary
    assert c["channel:email"].fix is not None and "EMAIL_URL" in c["channel:email"].fix
    assert c["channel:ops"].status == "ok"
    assert (
        "a json:// URL" in c["channel:ops"].summary and "no test sent" in c["channel:ops"].summary
    )
    assert c["webhook:crm"].status == "problem" and "$CRM_SECRET" in c["webhook:crm"].summary
    assert JSON_TOKEN not in json.dumps(report.to_dict())
    # the checks before keep their names and shape
    assert list(c)[:5] == ["config", "secrets", "database", "anthropic", "telegram"]


@pytest.mark.anyio
async def test_send_test_reaches_email_json_and_a_signed_webhook(tmp_path: Path) -> None:
    with SmtpSink() as smtp, WebhookReceiver(SECRET) as rx, WebhookReceiver(SECRET) as crm:
        config = write_company(tmp_path, **alerts(crm.url))
        environ = env("http://127.0.0.1:9") | {
            "EMAIL_URL": smtp.url(SMTP_PASSWORD),
            "OPS_URL": f"json://{rx.host}:{rx.port}/hook?token={JSON_TOKEN}",
            "CRM_SECRET": SECRET,
        }
        untested = await run_doctor(
            config, offline=True, environ=environ, systemd_runtime=NO_SYSTEMD
        )
        assert {checks(untested)[n].status for n in ("channel:email", "webhook:crm")} == {"ok"}
        assert smtp.messages == [] and rx.requests == [] and crm.requests == []

        report = await run_doctor(
            config, environ=environ, systemd_runtime=NO_SYSTEMD, send_test=True
        )
        c = checks(report)
        for name in ("channel:email", "channel:ops", "webhook:crm"):
            assert c[name].status == "ok", c[name]
            assert "the test message was accepted" in c[name].summary
        [mail] = smtp.messages
        assert "Acme Ops: test message" in str(mail["Subject"])
        assert "channel 'email' reaches you" in text_of(mail)
        assert smtp.logins == [("founder", SMTP_PASSWORD)]
        assert "Acme Ops: test message" in rx.requests[0].json()["title"]
        [event] = crm.requests
        assert event.verified, event.problem  # signed: standardwebhooks verifies it
        assert event.json()["type"] == "test"
        shown = json.dumps(report.to_dict())
        assert SMTP_PASSWORD not in shown and JSON_TOKEN not in shown and SECRET not in shown


@pytest.mark.anyio
async def test_a_test_send_that_fails_is_a_problem_saying_why(tmp_path: Path) -> None:
    with WebhookReceiver(SECRET) as rx, WebhookReceiver(SECRET) as crm:
        config = write_company(tmp_path, **alerts(crm.url))
        environ = env("http://127.0.0.1:9") | {
            # nothing listens on port 9 of loopback
            "EMAIL_URL": "mailto://founder:pw-0123456789@127.0.0.1:9"
            "?from=c@example.com&to=a@example.com&mode=insecure",
            "OPS_URL": f"json://{rx.host}:{rx.port}/hook",
            "CRM_SECRET": SECRET,
        }
        rx.go_down()
        crm.status = 400
        report = await run_doctor(
            config, environ=environ, systemd_runtime=NO_SYSTEMD, send_test=True
        )
    c = checks(report)
    for name in ("channel:email", "channel:ops", "webhook:crm"):
        assert c[name].status == "problem", c[name]
        assert "the test message was not delivered" in c[name].summary
    assert "mailto send failed" in c["channel:email"].summary
    assert "answered 400" in c["webhook:crm"].summary
    assert "pw-0123456789" not in json.dumps(report.to_dict())


def test_the_command_takes_send_test_and_prints_a_line_per_channel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with WebhookReceiver(SECRET) as rx:
        config = write_company(tmp_path, **alerts(rx.url))
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OPS_URL", f"json://{rx.host}:{rx.port}/hook")
            mp.setenv("CRM_SECRET", SECRET)
            mp.delenv("EMAIL_URL", raising=False)
            main(["doctor", "--config", str(config), "--send-test"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("PROBLEM  channel:email") for line in lines), lines
    assert any(line.startswith("ok       channel:ops") and "accepted" in line for line in lines), (
        lines
    )
    assert any(line.startswith("ok       webhook:crm") for line in lines), lines
    assert len(rx.requests) == 2  # the channel's test and the webhook's, to one receiver


@pytest.mark.anyio
async def test_without_telegram_doctor_says_alerts_still_reach_the_channels(
    tmp_path: Path,
) -> None:
    routines = {
        "daily-post": {
            "assignee": "ceo",
            "description": "Write the post.",
            "expected_output": "A post.",
            "trigger": {"cron": "0 9 * * *"},
        }
    }
    config = write_company(tmp_path, routines=routines, **alerts("http://127.0.0.1:9/hook"))
    report = await run_doctor(
        config, offline=True, environ=env("http://127.0.0.1:9"), systemd_runtime=NO_SYSTEMD
    )
    c = checks(report)["telegram"]
    assert c.status == "warning"
    assert "alerts reach only alerts.channels (email, ops), with no buttons" in c.summary
    assert "failures reach nobody" not in c.summary
    assert c.summary.endswith(
        "kept in the inbox instead (companyd inbox) and sent to ops (deliver: true)"
    )
