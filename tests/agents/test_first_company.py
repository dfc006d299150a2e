"""docs/first-company.md works as written: every command on the page, in its order.

The page's company.yaml is used as is, except what points at the real world: Telegram's
API root (the Bot API stand-in), and the fetch server allowed to read the loopback page
the scripted model asks for (the recipe refuses private addresses). The shell's variables
are the stand-ins' (the Messages API stand-in's URL and key, the stand-in's bot token);
`companyd run` is started as a real subprocess, and `pip install` runs as one; every other
`companyd` command runs by the CLI's entry point in a thread of this process
(:func:`~companyd.testing.inprocess.cli_in_thread`), in the page's directory and with the
shell's variables as its environment — the same argument parsing, checks, output and exit
codes as the console script, without a second interpreter importing companyd and the
anthropic SDK for each line (``doctor`` alone was 2.7 s of CPU as a process). The founder's
Telegram message is injected into the Bot API stand-in when `telegram setup` listens. Any
line of the page's ``sh`` blocks this test does not know fails it, so a new command on the
page needs a step here.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import re
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentkit import PerAgent, agent_of, tool_results
from companyd.config import load_config
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import cli_in_thread
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[2] / "docs" / "first-company.md"
TOKEN = "123456789:AAH-first-company-test-0123456789abcd"
FOUNDER = 5150
BRIEF = "Example Domain still says it is for illustrative examples; nothing is new."
PAGE = (
    "<html><body><main><h1>Example Domain</h1><p>This domain is for use in illustrative "
    "examples in documents.</p></main></body></html>"
)


def page_doc() -> tuple[str, list[str]]:
    """The page's company.yaml and every line of its ``sh`` blocks, in order."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- first-company: company.yaml -->\n```yaml\n(.*?)^```", text, re.M | re.S)
    assert m, "docs/first-company.md has no company.yaml block"
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        lines += [ln.strip() for ln in block.splitlines() if ln.strip()]
    return m.group(1), lines


@pytest.fixture
def page() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, code = (PAGE.encode(), 200) if self.path == "/" else (b"no", 404)
            self.send_response(code)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def approval_requests(bot: BotApiServer) -> list[Any]:
    """Messages to the founder with an Approve button."""
    return [
        m
        for m in bot.messages
        if any(
            "Approve" in b.get("text", "")
            for row in (m.reply_markup or {}).get("inline_keyboard") or []
            for b in row
        )
    ]


async def sh(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def companyd(
    words: list[str], env: dict[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    """``companyd WORDS[1:]`` as the shell would run it — in ``cwd``, with exactly ``env``
    as its environment — by the CLI's entry point in a thread of this process.
    """
    assert words[0] == "companyd", words
    monkeypatch.chdir(cwd)
    for name in {*os.environ, *env}:
        if name not in env:
            monkeypatch.delenv(name)
        elif os.environ.get(name) != env[name]:
            monkeypatch.setenv(name, env[name])
    async with asyncio.timeout(120):
        done = await asyncio.to_thread(cli_in_thread, words[1:])
    return done.rc, done.out, done.err


# slow: every command of a whole docs page, in order, against real daemons and stand-ins;
# 21 s in the whole suite's run (four workers on two cores): over the 20 s line
@pytest.mark.slow
async def test_every_command_of_first_company_md_works_in_order(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    company_yaml, lines = page_doc()
    model = PerAgent(researcher=[reply_tool_use("fetch", {"url": page}), reply_text(BRIEF)])
    ran: list[str] = []
    with short_dir() as work, MessagesAPIServer(responder=model) as srv:
        async with BotApiServer(token=TOKEN) as bot:
            doc = yaml.safe_load(company_yaml)
            doc["alerts"]["telegram"]["api_url"] = bot.url  # the stand-in, not Telegram
            fetch = doc["agents"]["researcher"]["mcp_servers"]["fetch"]
            fetch["args"] = [*fetch.get("args", []), "--allow-private-ips"]  # loopback page
            (work / "company.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            env = {
                k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))
            }
            env.update(
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                ANTHROPIC_BASE_URL=srv.base_url,
                PYTHONUNBUFFERED="1",
                PIP_NO_INDEX="1",  # `pip install` of what is installed: never the network
            )
            env.pop("STATE_DIRECTORY", None)
            stand_ins = {"ANTHROPIC_API_KEY": "test-key", "TELEGRAM_BOT_TOKEN": TOKEN}
            daemon: DaemonProcess | None = None
            asked = False
            approval_id = ""
            try:
                for line in lines:
                    words = shlex.split(line.split("  #", 1)[0])
                    if words[0] == "export":
                        name, _, _value = words[1].partition("=")
                        env[name] = stand_ins[name]
                    elif line == "set -a; . ./companyd.env; set +a":
                        for raw in (work / "companyd.env").read_text().splitlines():
                            name, _, value = raw.partition("=")
                            env[name] = value
                        assert env["TELEGRAM_CHAT_ID"] == str(FOUNDER)
                    elif words[:2] == ["pip", "install"]:
                        rc, out, err = await sh([sys.executable, "-m", *words], env, work)
                        assert rc == 0 and "already satisfied" in out, (out, err)
                    elif words[:3] == ["companyd", "telegram", "setup"]:
                        proc = asyncio.create_task(companyd(words, env, work, monkeypatch))
                        await bot.wait_for(lambda: bot.polling > 0, 60)
                        bot.inject_command(FOUNDER, "hello")
                        rc, out, err = await proc
                        assert rc == 0, (out, err)
                        assert "send it any message" in out and f"chat id {FOUNDER}" in out
                        assert any("connected" in m.text for m in bot.messages)
                    elif words[:2] == ["companyd", "run"]:
                        assert words[2:] == ["--config", "company.yaml"]
                        config = load_config(work / "company.yaml")
                        daemon = DaemonProcess(
                            work / "company.yaml",
                            config.state_dir(),
                            log=work / "daemon.log",
                            offline=False,
                            env=env,
                        )
                        await daemon.start(timeout=90)
                    elif words[:3] == ["companyd", "jobs", "run"]:
                        # the run waits for the founder: the command says so at once (exit 0)
                        rc, out, err = await companyd(words, env, work, monkeypatch)
                        assert rc == 0, (out, err)
                        assert "waits for your approval of a fetch call (ap-" in out, out
                        await bot.wait_for(lambda: bool(approval_requests(bot)), 60)
                        asked = True
                    elif words[:2] == ["companyd", "approve"]:
                        assert asked
                        assert re.fullmatch(r"ap-[0-9a-f]+", words[2])  # the page's example
                        words[2] = approval_id
                        rc, out, err = await companyd(words, env, work, monkeypatch)
                        assert rc == 0, (out, err)
                        # the run ends once approved, and its result reaches the phone
                        await bot.wait_for(lambda: any(BRIEF in m.text for m in bot.messages), 60)
                    elif words[0] == "companyd":
                        rc, out, err = await companyd(words, env, work, monkeypatch)
                        assert rc == 0, (line, out, err)
                        if words[1] == "validate":  # the page's company warns of nothing
                            assert "warning" not in out + err, (out, err)
                        if words[1] == "doctor":
                            assert "PROBLEM" not in out, out
                            assert "@companyd_test_bot" in out
                            assert "company.yaml' valid: 1 agent, 1 routine\n" in out, out
                        if words[1] == "inbox":
                            found = re.findall(r"\bap-[0-9a-f]+", out)
                            assert found, out
                            approval_id = found[0]
                        if words[1:3] == ["runs", "last"]:
                            assert BRIEF in out, out
                    else:
                        raise AssertionError(
                            f"the test does not know this line of the page: {line!r}"
                        )
                    ran.append(line)
            finally:
                if daemon is not None and daemon.returncode is None:
                    assert await daemon.stop() == 0
    assert ran == lines
    # the researcher read the page through the real fetch server, after the approval
    mine = [r for r in srv.requests if agent_of(r) == "researcher"]
    results = [b for r in mine for b in tool_results(r)]
    assert any("illustrative examples" in str(b["content"]) for b in results), results
    # the first message from the company counts its one agent and routine as such
    assert any("\n1 agent, 1 routine\n" in m.text for m in bot.messages), bot.messages
    # the brief reached the phone
    assert any(BRIEF in m.text and str(m.chat_id) == str(FOUNDER) for m in bot.messages)
