"""The tool recipes of docs/tools.md ("Recipes") work as written: an agent calls each
published MCP server through the Messages API stand-in, with the real server as a stdio
subprocess — ``mcp-server-fetch`` against a loopback HTTP page, the official filesystem
server in a temporary folder. The YAML is read from the page; only the install paths are
mapped to this machine's (and the fetch server is allowed the loopback page).
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentkit import PerAgent, agent_of, running_company, tool_results, write_company
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[2] / "docs" / "tools.md"
PAGE = (
    "<html><head><title>Acme prices</title></head><body><main><h1>Acme prices</h1>"
    "<p>The basic plan costs 29 euros a month and includes five seats for the team.</p>"
    "<p>The business plan costs 99 euros a month and includes fifty seats.</p>"
    "</main></body></html>"
)


def recipe(name: str) -> dict[str, Any]:
    """The ``agents:`` block under ``<!-- recipe: NAME -->`` in docs/tools.md."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"<!-- recipe: {name} -->\n```yaml\n(.*?)^```", text, re.M | re.S)
    assert m, f"docs/tools.md has no '<!-- recipe: {name} -->' YAML block"
    doc = yaml.safe_load(m.group(1))
    assert set(doc) == {"agents"}, "a recipe is one agent to paste under agents:"
    agents: dict[str, Any] = doc["agents"]
    return agents


@pytest.fixture
def page() -> Iterator[str]:
    """A loopback HTTP server with one page (and no robots.txt: 404, i.e. allowed)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/prices":
                body = PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
            else:
                body = b"not found"
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prices"
    finally:
        server.shutdown()
        server.server_close()


async def test_the_fetch_recipe_reads_a_page(tmp_path: Path, page: str) -> None:
    agents = recipe("fetch")
    (slug,) = agents
    server = agents[slug]["mcp_servers"]["fetch"]
    exe = Path(sys.prefix) / "bin" / "mcp-server-fetch"
    assert server["command"] == "/opt/companyd/venv/bin/mcp-server-fetch"
    assert exe.is_file(), "mcp-server-fetch is in the test extra: pip install -e '.[test]'"
    server["command"] = str(exe)  # this venv instead of /opt/companyd/venv
    assert server["env"]["PATH"] == "/opt/companyd/venv/bin"  # no node for readabilipy
    server["env"] = {**server["env"], "PATH": str(exe.parent)}
    guarded = {**agents[slug], "mcp_servers": {"fetch": dict(server)}, "reports_to": slug}
    server["args"] = [*server.get("args", []), "--allow-private-ips"]  # the loopback page
    cfg = write_company(tmp_path, {slug: agents[slug], "guarded": guarded})
    model = PerAgent(
        **{
            slug: [reply_tool_use("fetch", {"url": page}), reply_text("Basic is 29 euros.")],
            "guarded": [reply_tool_use("fetch", {"url": page}), reply_text("Refused.")],
        }
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask(slug, "What does the basic plan cost?")
            refused = await d.ask("guarded", "What does the basic plan cost?")
    assert out.status == "ok", out
    assert refused.status == "ok", refused
    mine = [r for r in srv.requests if agent_of(r) == slug]
    assert "fetch" in {t["name"] for t in mine[0].body["tools"]}
    (result,) = tool_results(mine[1])
    text = str(result["content"])
    assert not result.get("is_error"), text
    assert "The basic plan costs 29 euros a month" in text
    assert f"Contents of {page}" in text  # the page, simplified to text by the server
    # the recipe as written (no --allow-private-ips) refuses the loopback address
    theirs = [r for r in srv.requests if agent_of(r) == "guarded"]
    (blocked,) = tool_results(theirs[1])
    assert "29 euros" not in str(blocked["content"])
    assert "private" in str(blocked["content"]).lower()


def _official_filesystem_server() -> str:
    env = os.environ.get("COMPANYD_OFFICIAL_FILESYSTEM_SERVER")
    why = None
    if shutil.which("node") is None:
        why = "node is not installed"
    elif not env:
        why = (
            "COMPANYD_OFFICIAL_FILESYSTEM_SERVER is not set; run `export COMPANYD_OFFICIAL_"
            "FILESYSTEM_SERVER=$(bench/install_official_filesystem_server.sh)`"
        )
    elif not Path(env).is_file():
        why = f"COMPANYD_OFFICIAL_FILESYSTEM_SERVER={env!r} is not a file"
    if why is not None:
        pytest.skip(f"official MCP filesystem server unavailable: {why}")
    assert env is not None
    return env


@pytest.mark.node
async def test_the_files_recipe_writes_and_reads_in_its_folder_only(tmp_path: Path) -> None:
    index = _official_filesystem_server()
    agents = recipe("files")
    (slug,) = agents
    server = agents[slug]["mcp_servers"]["files"]
    jitless, script, folder = server["args"]
    assert jitless == "--jitless" and folder == "/var/lib/companyd/files"
    assert script.endswith("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
    assert server["sandbox"] == {
        "read": ["/opt/companyd/mcp"],
        "write": ["/var/lib/companyd/files"],
    }
    files = tmp_path / "files"
    files.mkdir()
    files.chmod(0o777)  # the sandboxed server's user (nobody, when the tests run as root)
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the agent")
    server["command"] = shutil.which("node")
    server["args"] = [jitless, index, str(files)]
    # this cache's install instead of /opt/companyd/mcp, the test's folder for the files
    server["sandbox"] = {"read": [index.split("/node_modules/")[0]], "write": [str(files)]}
    cfg = write_company(tmp_path, agents)
    note = files / "notes" / "monday.md"
    model = PerAgent(
        **{
            slug: [
                reply_tool_use("create_directory", {"path": str(files / "notes")}),
                reply_tool_use("write_file", {"path": str(note), "content": "# Monday\nCall Ada."}),
                reply_tool_use("read_text_file", {"path": str(note)}),
                reply_tool_use("read_text_file", {"path": str(outside)}),
                reply_text("Noted."),
            ]
        }
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask(slug, "Note: call Ada on Monday.")
    assert out.status == "ok", out
    assert note.read_text() == "# Monday\nCall Ada."
    mine = [r for r in srv.requests if agent_of(r) == slug]
    names = {t["name"] for t in mine[0].body["tools"]}
    assert {"read_text_file", "write_file", "list_directory"} <= names
    (read,) = tool_results(mine[3])
    assert "Call Ada." in str(read["content"]) and not read.get("is_error")
    (denied,) = tool_results(mine[4])
    assert denied.get("is_error") and "not for the agent" not in str(denied["content"])


@pytest.mark.node
async def test_a_large_file_is_cut_for_the_model_and_a_huge_one_refused(tmp_path: Path) -> None:
    # The official server (TypeScript: a message's id comes last) reading a file of 300,000
    # characters (cut to tools.max_result_chars), one of 3 MiB (over limits.message_mb: the
    # call fails, the server runs on), then listing its folder.
    index = _official_filesystem_server()
    agents = recipe("files")
    (slug,) = agents
    server = agents[slug]["mcp_servers"]["files"]
    files = tmp_path / "files"
    files.mkdir()
    files.chmod(0o755)
    (files / "big.log").write_text("0123456789" * 30_000)
    (files / "huge.log").write_text("x" * 3 * 2**20)
    server["command"] = shutil.which("node")
    server["args"] = [server["args"][0], index, str(files)]
    server["sandbox"] = {"read": [index.split("/node_modules/")[0], str(files)]}
    server["limits"] = {"message_mb": 1}
    cfg = write_company(tmp_path, agents)
    model = PerAgent(
        **{
            slug: [
                reply_tool_use("read_text_file", {"path": str(files / "big.log")}),
                reply_tool_use("read_text_file", {"path": str(files / "huge.log")}),
                reply_tool_use("list_directory", {"path": str(files)}),
                reply_text("Read what I could."),
            ]
        }
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask(slug, "Read the logs.")
            failed = d.bus.recent({"mcp_server_failed"}, limit=10)
    assert out.status == "ok", out
    mine = [r for r in srv.requests if agent_of(r) == slug]
    (big,) = tool_results(mine[1])
    assert not big.get("is_error")
    assert big["content"] == ("0123456789" * 10_000) + " … [cut: 300,000 chars in all]"
    (huge,) = tool_results(mine[2])
    assert huge.get("is_error")
    assert huge["content"].startswith(
        "MCP server 'files' refused 'read_text_file': the answer was "
    ), huge
    assert "more than the 1 MiB a message of this tool server may be" in huge["content"]
    (listing,) = tool_results(mine[3])
    assert not listing.get("is_error") and "big.log" in str(listing["content"])
    assert failed == []
