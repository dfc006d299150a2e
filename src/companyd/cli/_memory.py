"""``companyd memory …``: read, check, repair, export, import and serve the company memory.

Every command takes ``--file F``; without it the file is ``$MEMORY_FILE_PATH`` (as the
official server reads it; a relative path is taken from the current directory, ``~`` is
expanded), else company.yaml's memory path (``memory.path``, else
``<state_dir>/memory.jsonl``). Commands that report take ``--json``.

Read commands never write: they open the file read-only (they still see writes a running
daemon has journaled but not yet folded in). ``check`` exits 0 when the file is clean and 1
when it needs repair, saying what it found; ``repair`` fixes it in place, atomically, keeping
what it removes in ``<file>.corrupt``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from companyd._fs import read_regular_file
from companyd.cli._main import print_json
from companyd.config import default_config_path
from companyd.errors import CompanydError
from companyd.memory import GraphStore, counted, neighbourhood, parse_graph, write_atomic

# Three imports stay inside their commands (``_export``, ``_import``, ``_serve_mcp``), for a
# written reason: every ``companyd`` command, ``companyd run`` included, builds the whole
# parser and so imports this module; the mcp SDK (``memory.mcp_server``) and networkx
# (``memory.view``) imported here doubled the daemon's peak RSS (48.8 -> 91 MB) and tripled
# its CPU to READY=1 (docs/benchmarks.md, "daemon"; tests/daemon/test_startup_imports.py).

__all__ = ["register", "resolve_memory_path"]


def register(sub: Any) -> None:
    """Add ``memory`` and its subcommands to the top-level CLI."""
    p = sub.add_parser(
        "memory",
        help="the company memory (MCP knowledge graph): read, check, repair, export, serve",
        description=(
            "Every command takes --file F; without it the file is $MEMORY_FILE_PATH (a relative "
            "path is taken from the current directory, ~ is expanded), else company.yaml's "
            "memory path (memory.path, else <state_dir>/memory.jsonl). Commands that report "
            "take --json."
        ),
    )
    msub = p.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: _usage(p))

    def add(name: str, help: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = msub.add_parser(name, help=help, description=help)
        c.add_argument(
            "--file",
            type=Path,
            help="the graph file (default: $MEMORY_FILE_PATH, else company.yaml's memory path)",
        )
        c.add_argument("--config", type=Path, help="company.yaml to take the memory path from")
        c.add_argument(
            "--state-dir",
            type=Path,
            help="the state directory of the company (its daemon's memory file, else "
            "company.yaml's memory.path, else <state-dir>/memory.jsonl)",
        )
        if json_flag:
            c.add_argument("--json", action="store_true", help="machine-readable output")
        return c

    def guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        # A file we cannot read or write is the operator's to fix: say which and why, not a
        # traceback ("internal error") from the top-level CLI.
        def run(args: argparse.Namespace) -> int:
            try:
                return func(args)
            except OSError as exc:
                where = exc.filename if exc.filename is not None else args.file
                raise CompanydError(
                    f"memory: cannot use {str(where)!r}: {exc.strerror or exc}; check that the "
                    "path exists and that this user may read and write it"
                ) from None

        return run

    c = add("read-graph", "print the whole graph")
    c.set_defaults(func=guarded(_read_graph))
    c = add("search", "entities whose name, type or observations contain QUERY")
    c.add_argument("query")
    c.set_defaults(func=guarded(_search))
    c = add("open", "the named entities and their relations")
    c.add_argument("names", nargs="+", metavar="NAME")
    c.set_defaults(func=guarded(_open))
    c = add("neighbours", "what is within --depth hops of an entity (as agents see it)")
    c.add_argument("name")
    c.add_argument("--depth", type=_depth, default=1, help="hops to follow (default 1)")
    c.set_defaults(func=guarded(_neighbours))
    c = add("check", "exit 0 if the file is clean, 1 if it needs repair (says what)")
    c.set_defaults(func=guarded(_check))
    c = add("repair", "repair the file in place; what is removed goes to <file>.corrupt")
    c.set_defaults(func=guarded(_repair))
    c = add("export", "write the graph as GraphML or node-link JSON", json_flag=False)
    c.add_argument("--format", required=True, choices=("graphml", "json"))
    c.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    c.set_defaults(func=guarded(_export))
    c = add("import", "merge an MCP memory JSONL file or node-link JSON into the graph")
    c.add_argument("source", type=Path, metavar="FILE")
    c.set_defaults(func=guarded(_import))
    c = add(
        "serve-mcp",
        "serve the graph over MCP stdio (a drop-in for @modelcontextprotocol/server-memory)",
        json_flag=False,
    )
    c.set_defaults(func=guarded(_serve_mcp))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of hops, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more hops, got {value!r}")
    return value


def resolve_memory_path(
    file: Path | None, config: Path | None = None, state_dir: Path | None = None
) -> Path:
    """``file``, else ``$MEMORY_FILE_PATH``, else the memory file of the daemon running
    company.yaml (or on ``state_dir``: the one it opened at start — a reload that changed
    ``memory.path`` waits for the restart), else company.yaml's memory path (with
    ``state_dir`` as its state directory; with no company.yaml there,
    ``<state_dir>/memory.jsonl``).

    Raises:
        CompanydError: none of them is available (the message lists the ways).
        ConfigError: no daemon claims company.yaml and the file is invalid.
    """
    if file is not None:
        return Path(os.path.expanduser(file)).absolute()
    env = os.environ.get("MEMORY_FILE_PATH")
    if env:
        return Path(os.path.expanduser(env)).absolute()
    if state_dir is not None:
        return _memory_of_state(state_dir, config)

    path = config or default_config_path()
    if config is None and not Path(path).exists():
        raise CompanydError(
            f"which memory file? {str(path)!r} does not exist; pass --file FILE, set "
            "MEMORY_FILE_PATH, or run where company.yaml is (or set COMPANYD_CONFIG)"
        )
    # The daemon claiming company.yaml is asked first: its answer is the file its agents
    # use, and asking costs a round trip where loading company.yaml costs its schema.
    running = _running_memory_path(Path(path))
    if running is not None:
        return running
    return _configured_memory(Path(path), None)


def _configured_memory(path: Path, state_dir: Path | None) -> Path:
    """The memory file company.yaml ``path`` names (``memory.path``, relative to it; else
    ``memory.jsonl`` in its state directory, or in ``state_dir`` when given).

    Read as the run journal's readers read it (store_location: the usual shape line by
    line, anything else by the loader, which validates it). The config machinery
    (pydantic, the schema, the cross-checks: ~0.1 s of CPU) is for finding the file only;
    `serve-mcp --file F`, which the daemon and the suite start dozens of times, does
    without it (issue 31).
    """
    from companyd.cli._daemon import store_location
    from companyd.config import UNUSUAL, peek_nested

    cfg, where, _ = store_location(argparse.Namespace(config=path, state_dir=state_dir))
    if cfg is None:
        try:
            text = read_regular_file(path, 10 * 1024 * 1024).decode("utf-8")
        except (OSError, ValueError):
            text = ""  # changed under us: the loader below says what is wrong
        memory = peek_nested(text.removeprefix("\ufeff"), "memory", "path") if text else UNUSUAL
        if memory != UNUSUAL:
            if memory:  # relative to company.yaml, as CompanyConfig.memory_path
                return (Path(os.path.realpath(path)).parent / memory).absolute()
            return where / "memory.jsonl"
        from companyd.config import load_config

        cfg = load_config(path)
        where = cfg.state_dir(state_dir)
    found: Path = cfg.memory_path(where)
    return found


def _memory_of_state(state_dir: Path, config: Path | None) -> Path:
    """The memory file of the company whose state is ``state_dir``: its running daemon's,
    else (no ``config`` given) ``<state_dir>/memory.jsonl`` when it exists, else
    company.yaml's ``memory.path`` (``config``, or the usual one when it exists), else
    ``<state_dir>/memory.jsonl``.
    """
    from companyd.cli._daemon import running_daemon

    state_dir = Path(os.path.expanduser(state_dir)).absolute()
    running = _memory_of_daemon(
        running_daemon(argparse.Namespace(config=config, state_dir=state_dir, socket=None))
    )
    if running is not None:
        return running
    path = config or default_config_path()
    own = state_dir / "memory.jsonl"
    if config is None and (own.exists() or not Path(path).exists()):
        # the state directory's own graph before the company.yaml of the current directory,
        # which may be another company's (its memory.path somewhere else)
        return own
    return _configured_memory(Path(path), state_dir)


def _running_memory_path(config: Path) -> Path | None:
    """The memory file of the daemon that claims ``config`` (its ``ping``), or None when
    none runs (or it is too old to say): the one its agents read and write.
    """
    from companyd.daemon import claimed_daemon

    return _memory_of_daemon(claimed_daemon(config))


def _memory_of_daemon(client: Any) -> Path | None:
    """The memory file ``client``'s daemon opened (its ``ping``), or None: no daemon, one
    not answering (starting, stopping: the file's is all we know), or too old to say.
    """
    if client is None:
        return None
    try:
        where = client.ping().get("memory_path")
    except CompanydError:
        return None
    return Path(where) if isinstance(where, str) else None


def _store(args: argparse.Namespace, *, readonly: bool) -> Any:
    path = resolve_memory_path(args.file, args.config, args.state_dir)
    if not path.parent.is_dir():
        raise CompanydError(
            f"memory file {str(path)!r}: directory {str(path.parent)!r} does not exist; "
            "create it or pass another --file"
        )
    return GraphStore(path, readonly=readonly)


def _open_readonly(args: argparse.Namespace) -> Any:
    store = _store(args, readonly=True)
    if not store.path.exists():
        # an empty graph is the right answer for a company that has written nothing yet,
        # but a mistyped --file reads the same: say which it is not sure of
        print(
            f"warning: no memory file at {str(store.path)!r} yet: nothing has been written "
            "to this memory (or the path is not the company's); showing an empty graph",
            file=sys.stderr,
        )
    report = store.open()
    if report.needs_repair:
        print(
            f"warning: {store.path} needs repair ({report.summary()}); showing what could be "
            f"read — run `companyd memory repair --file {store.path}`",
            file=sys.stderr,
        )
    return store


def _emit(args: argparse.Namespace, data: Any, text: str) -> int:
    if args.json:
        print_json(data)
    else:
        print(text)
    return 0


def _graph_text(graph: dict[str, Any]) -> str:
    entities, relations = graph["entities"], graph["relations"]
    lines = [
        f"{counted(len(entities), 'entity', 'entities')}, {counted(len(relations), 'relation')}"
    ]
    for e in entities:
        lines.append(f"{e['name']} [{e['entityType']}]")
        lines.extend(f"  - {o}" for o in e["observations"])
    if relations:
        lines.append("relations:")
        lines.extend(f"  {r['from']} --{r['relationType']}--> {r['to']}" for r in relations)
    return "\n".join(lines)


def _tool(args: argparse.Namespace, tool: str, arguments: dict[str, Any]) -> int:
    store = _open_readonly(args)
    try:
        result = store.call(tool, arguments)
    finally:
        store.close()
    return _emit(args, result, _graph_text(result))


def _read_graph(args: argparse.Namespace) -> int:
    return _tool(args, "read_graph", {})


def _search(args: argparse.Namespace) -> int:
    return _tool(args, "search_nodes", {"query": args.query})


def _open(args: argparse.Namespace) -> int:
    return _tool(args, "open_nodes", {"names": args.names})


def _neighbours(args: argparse.Namespace) -> int:
    store = _open_readonly(args)
    try:
        hood = store.read(lambda g: neighbourhood(g, args.name, args.depth))
    finally:
        store.close()
    _emit(args, hood.to_dict(), hood.text())
    return 0 if hood.found else 1


def _check(args: argparse.Namespace) -> int:
    store = _store(args, readonly=True)
    report = store.open()
    graph_bytes = store.path.read_bytes() if store.path.exists() else b""
    _, fmt = parse_graph(graph_bytes, check_format=True)
    store.close()
    data = report.to_dict()
    data["file"] = str(store.path)
    data["noncanonical_lines"] = fmt.noncanonical
    data["journal_pending_records"] = store.journal_records
    data["exists"] = bool(graph_bytes) or store.path.exists()
    if args.json:
        print_json(data)
        return 1 if report.needs_repair else 0
    if not data["exists"] and not store.journal_path.exists():
        print(f"{store.path}: does not exist yet (an empty graph; the first write creates it)")
        return 0
    if not report.needs_repair:
        extra = []
        if report.preserved:
            extra.append(f"{counted(report.preserved, 'line')} of unknown type kept")
        if fmt.noncanonical:
            extra.append(
                f"{counted(fmt.noncanonical, 'line')} not in canonical form (rewritten on next "
                "save)"
            )
        if store.journal_records:
            extra.append(
                f"{counted(store.journal_records, 'journaled write')} not yet folded into the file"
            )
        tail = f" ({'; '.join(extra)})" if extra else ""
        print(
            f"{store.path}: clean — {counted(report.entities, 'entity', 'entities')}, "
            f"{counted(report.relations, 'relation')}{tail}"
        )
        return 0
    print(f"{store.path}: needs repair — {report.summary()}")
    for q in report.quarantined:
        where = f"line {q.lineno}" if q.lineno else "journal"
        action = "would be removed" if q.dropped else "would be rewritten"
        print(f"  {where}: {q.reason} ({action}; {len(q.raw)} bytes)")
    print(
        f"run `companyd memory repair --file {store.path}` to fix it; removed lines are kept "
        f"in {store.corrupt_path}"
    )
    return 1


def _repair(args: argparse.Namespace) -> int:
    store = _store(args, readonly=False)
    try:
        report = store.repair()
    finally:
        store.close()
    data = report.to_dict()
    data["file"] = str(store.path)
    data["corrupt_file"] = str(store.corrupt_path) if report.quarantined else None
    if report.needs_repair:
        text = f"{store.path}: repaired — {report.summary()}"
        if report.quarantined:
            text += f"; original lines kept in {store.corrupt_path}"
    else:
        text = f"{store.path}: was clean; rewritten in canonical form"
    return _emit(args, data, text)


def _export(args: argparse.Namespace) -> int:
    from companyd.memory import export_graphml, export_node_link

    store = _open_readonly(args)
    try:
        if args.format == "graphml":
            data = store.read(export_graphml)
        else:
            doc = store.read(export_node_link)
            data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(
                "utf-8", "backslashreplace"
            )
    finally:
        store.close()
    if args.output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        write_atomic(Path(args.output), data)
        print(f"wrote {args.output} ({len(data)} bytes, {args.format})", file=sys.stderr)
    return 0


#: Far above any knowledge graph a company builds; refuses a device given by mistake.
_MAX_IMPORT_BYTES = 1024 * 1024 * 1024


def _import(args: argparse.Namespace) -> int:
    from companyd.memory import graph_from_node_link

    source: Path = args.source
    try:
        # never a plain read: a FIFO with no writer would hang the command
        raw = read_regular_file(source, _MAX_IMPORT_BYTES)
    except OSError as exc:
        raise CompanydError(
            f"cannot read {str(source)!r}: {exc.strerror or exc}; give a graph file "
            "(MCP memory JSONL or node-link JSON)"
        ) from None
    incoming = None
    stripped = raw.lstrip()
    if stripped.startswith(b"{") and b'"nodes"' in raw[:4096] + raw[-4096:]:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None  # several lines: JSONL that mentions "nodes"
        if isinstance(doc, dict) and "nodes" in doc:
            try:
                incoming = graph_from_node_link(doc)
            except ValueError as exc:
                raise CompanydError(
                    f"cannot import {str(source)!r}: it is node-link JSON (it has 'nodes') "
                    f"but {exc}. Nothing was imported; fix that entry, or export the graph "
                    "again with `companyd memory export --format json`"
                ) from None
    if incoming is None:
        incoming, report = parse_graph(raw)
        if report.needs_repair:
            print(
                f"warning: {source}: {report.summary()}; importing what could be read",
                file=sys.stderr,
            )
    entities = [e.to_dict() for e in incoming.entities()]
    relations = [r.to_dict() for r in incoming.relations()]
    if not entities and not relations and stripped:
        print(
            f"warning: {source}: no entities or relations found in it; expected the MCP "
            "memory JSONL format (one JSON object per line) or node-link JSON from "
            "`companyd memory export --format json`",
            file=sys.stderr,
        )
    store = _store(args, readonly=False)
    try:
        store.open()
        existing = store.read(lambda g: {e["name"] for e in entities if g.entity(e["name"])})
        calls: list[tuple[str, dict[str, Any]]] = [
            ("create_entities", {"entities": [e for e in entities if e["name"] not in existing]}),
            (
                "add_observations",
                {
                    "observations": [
                        {"entityName": e["name"], "contents": e["observations"]}
                        for e in entities
                        if e["name"] in existing
                    ]
                },
            ),
            ("create_relations", {"relations": relations}),
        ]
        outcomes = store.execute(calls)
        store.compact()
    finally:
        store.close()
    for ok, value in outcomes:
        if not ok:
            raise CompanydError(f"import into {str(store.path)!r} failed: {value}")
    created, observed, related = (value for _, value in outcomes)
    added_obs = sum(len(r["addedObservations"]) for r in observed["results"])
    added_entities, added_relations = len(created["entities"]), len(related["relations"])
    data = {
        "file": str(store.path),
        "source": str(source),
        "entities_added": added_entities,
        "observations_added": added_obs,
        "relations_added": added_relations,
    }
    text = (
        f"imported {source} into {store.path}: "
        f"{counted(added_entities, 'entity', 'entities')}, "
        f"{counted(added_obs, 'observation')}, "
        f"{counted(added_relations, 'relation')} added"
    )
    return _emit(args, data, text)


def _serve_mcp(args: argparse.Namespace) -> int:
    from companyd.memory import serve_stdio

    # `serve-mcp <&-`: a closed stdin (or stdout) is /dev/null — the end of the input at once
    # (exit 0), output discarded. Left closed, the event loop's epoll or the memory file
    # would take the lowest free descriptor and be served as the protocol's stream.
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    path = resolve_memory_path(args.file, args.config, args.state_dir)
    if not path.parent.is_dir():
        raise CompanydError(
            f"memory file {str(path)!r}: directory {str(path.parent)!r} does not exist; "
            "create it or pass another --file"
        )
    asyncio.run(serve_stdio(path))
    return 0
