"""Cross-checks: what spans more than one value of company.yaml.

:func:`cross_check` runs on whatever parsed, valid or not: names are slugs, references
name existing agents and departments, reports_to forms one tree, instruction files exist
and are text, cron expressions and time zones are valid, model ids and alert routes are
known (warnings). It reads the raw data defensively and skips what an earlier pass already
explained, so each mistake is reported once. :func:`check_colleague_waits` runs on the
validated file: a colleague that may wait for the founder longer than its asker waits for
it (a warning).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd._fs import FileTooLarge, NotRegularFile, read_regular_file
from companyd.config._cron import check_tz, cron_problem
from companyd.config._done_when import MEMORY_TOOLS, OPTIONAL_BUILTINS
from companyd.config._report import Path_, Report, dotted
from companyd.config._scalars import bare_model_id
from companyd.config._wording import closest
from companyd.llm import is_known_model

if TYPE_CHECKING:
    from decimal import Decimal

    from companyd.config._schema import AgentSpec, CompanyFile

__all__ = ["SLUG_RE", "check_budgets_cover_a_call", "check_colleague_waits", "cross_check"]

SLUG_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")

_MB = 1024 * 1024
#: An agent's instructions travel in every request: far beyond any context window.
_MAX_INSTRUCTIONS_BYTES = 1 * _MB


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def cross_check(data: dict[str, Any], rep: Report, base: Path) -> dict[str, str]:
    """Checks that span more than one value. They read the raw data defensively (any part
    may be malformed; the schema pass reports that) and skip what is already explained,
    so each mistake is reported once. Returns the loaded instruction files by agent.
    """
    agents = _as_dict(data.get("agents"))
    routines = _as_dict(data.get("routines"))
    names = list(agents)
    # References are checked only against a well-formed list of names: with `agents:`
    # missing or malformed, every assignee would look unknown (one mistake, many lines).
    names_known = isinstance(data.get("agents"), dict)
    depts = _departments(data.get("departments"), ("departments",), rep)
    depts_known = "departments" not in data or isinstance(data.get("departments"), dict)

    def unknown_agent(path: Path_, name: str, what: str) -> None:
        if not names_known:
            return
        close = closest(name, names)
        hint = f"did you mean {close[0]!r}? " if close else ""
        rep.add(
            path,
            f"expected the name of an agent for {what}, got {name!r}; {hint}agents: "
            f"{', '.join(names) or '(none)'}",
        )

    if isinstance(data.get("agents"), dict) and not agents:
        rep.add(("agents",), "expected at least one agent, got none; add the CEO first")
    for slug in agents:
        if not SLUG_RE.match(slug):
            rep.add(
                ("agents", slug),
                f"expected an agent name made of lower-case letters, digits, '-' and '_', "
                f"starting with a letter (e.g. 'head-of-sales'), got {slug!r}",
                key=True,
            )
    for slug in routines:
        if not SLUG_RE.match(slug):
            rep.add(
                ("routines", slug),
                f"expected a routine name made of lower-case letters, digits, '-' and '_', "
                f"starting with a letter (e.g. 'daily-post'), got {slug!r}",
                key=True,
            )
    for slug, dpath in depts.items():
        if not SLUG_RE.match(slug):
            rep.add(
                dpath,
                f"expected a department name made of lower-case letters, digits, '-' and "
                f"'_', starting with a letter, got {slug!r}",
                key=True,
            )
        if slug in agents:
            rep.add(
                dpath,
                f"{slug!r} names both a department and an agent; rename one of them",
                key=True,
            )

    company = _as_dict(data.get("company"))
    check_tz(company.get("timezone"), ("company", "timezone"), rep)

    instructions: dict[str, str] = {}
    for slug, a in agents.items():
        if not isinstance(a, dict):
            continue
        ap: Path_ = ("agents", slug)
        boss = a.get("reports_to")
        if isinstance(boss, str):
            if boss == slug:
                rep.add((*ap, "reports_to"), f"expected someone else, got {slug!r} itself")
            elif boss not in agents:
                unknown_agent((*ap, "reports_to"), boss, "reports_to")
        dept = a.get("department")
        if isinstance(dept, str) and dept not in depts and depts_known:
            close = closest(dept, list(depts))
            hint = f"did you mean {close[0]!r}? " if close else ""
            rep.add(
                (*ap, "department"),
                f"expected a department declared under 'departments', got {dept!r}; "
                f"{hint}departments: {', '.join(depts) or '(none declared)'}",
            )
        for field_name, what in (("consult", "consult"), ("can_modify", "can_modify")):
            items = a.get(field_name)
            if not isinstance(items, list):
                continue
            for i, c in enumerate(items):
                if not isinstance(c, str):
                    continue
                if c == slug:
                    rep.add((*ap, field_name, i), f"expected another agent, got {slug!r} itself")
                elif c not in agents:
                    unknown_agent((*ap, field_name, i), c, what)
        text = a.get("instructions")
        file_ref = a.get("instructions_file")
        if "instructions" in a and "instructions_file" in a:
            rep.add(
                ap,
                "expected either 'instructions' (inline text) or 'instructions_file' (a "
                "path), got both; keep one",
                key=True,
            )
        elif isinstance(file_ref, str):
            loaded = _read_instructions(file_ref, (*ap, "instructions_file"), base, rep)
            if loaded is not None:
                instructions[slug] = loaded
        elif isinstance(text, str) and not text.strip():
            rep.add((*ap, "instructions"), "expected instructions, got empty text")
        elif "instructions" in a and text is None:
            rep.add(
                (*ap, "instructions"),
                "expected instructions, got nothing (an empty value); write them, or remove "
                "the key and give 'instructions_file'",
            )
        elif "instructions_file" in a and file_ref is None:
            rep.add(
                (*ap, "instructions_file"),
                "expected a path, got nothing (an empty value); write the path of the "
                "instructions file (relative to company.yaml)",
            )
        elif not any(k in a for k in ("instructions", "instructions_file", "role", "goal")):
            rep.add(
                ap,
                "expected 'instructions' (inline text) or 'instructions_file' (a path), or "
                "CrewAI-style 'role' and 'goal', got none of them",
                key=True,
            )
        elif "instructions" not in a and "instructions_file" not in a:
            given = [k for k in ("role", "goal") if a.get(k) is not None]
            if len(given) == 1:
                other = "goal" if given[0] == "role" else "role"
                rep.add(
                    ap,
                    f"expected CrewAI-style 'role' and 'goal' together, got only "
                    f"{given[0]!r}; add {other!r} (or give 'instructions')",
                    key=True,
                )

    _check_org_chart(agents, rep)

    for slug, r in routines.items():
        if not isinstance(r, dict):
            continue
        rp: Path_ = ("routines", slug)
        for field_name in ("assignee", "reviewer"):
            who = r.get(field_name)
            if isinstance(who, str) and who not in agents:
                unknown_agent((*rp, field_name), who, field_name)
            elif (
                isinstance(who, str)
                and r.get("enabled") is not False
                and _as_dict(agents[who]).get("enabled") is False
            ):
                # Every fire would be cancelled (and alerted) without doing any work. A
                # warning, not an error: disabling an agent must not make a file that ran
                # yesterday refuse to start or reload.
                rep.warn(
                    (*rp, field_name),
                    f"{field_name} {who!r} has `enabled: false`: every fire of this routine "
                    "will be cancelled; enable the agent, or set `enabled: false` on this "
                    "routine too",
                )
        _check_done_when(r, rp, agents, rep)
        trigger = _as_dict(r.get("trigger"))
        cron = trigger.get("cron")
        if isinstance(cron, str) and not rep.is_settled((*rp, "trigger", "cron")):
            problem = cron_problem(cron)
            if problem:
                rep.add((*rp, "trigger", "cron"), problem)
        check_tz(trigger.get("timezone"), (*rp, "trigger", "timezone"), rep)

    routes = _as_dict(_as_dict(data.get("alerts")).get("routes"))
    if routes:
        # Imported here: the event catalog (and asyncio under the bus) costs `validate` more
        # than the rest of the checks, and only a file with alert routes needs its names.
        from companyd.events import KINDS

        for kind in routes:
            if kind not in KINDS:
                close = closest(kind, list(KINDS))
                hint = f"did you mean {close[0]!r}? " if close else ""
                rep.warn(
                    ("alerts", "routes", kind),
                    f"expected a known event kind, got {kind!r}; {hint}this route applies "
                    f"only if something publishes that kind (known: {', '.join(KINDS)})",
                    key=True,
                )

    quiet = _as_dict(_as_dict(data.get("alerts")).get("quiet_hours"))
    check_tz(quiet.get("timezone"), ("alerts", "quiet_hours", "timezone"), rep)
    _check_models(data, rep)
    _check_deliveries(data, rep)
    _check_webhook_deliveries(data, rep)
    return instructions


def _check_done_when(
    routine: dict[str, Any], rp: Path_, agents: dict[str, Any], rep: Report
) -> None:
    """Each ``done_when`` ``tool: NAME`` names one of the assignee's tools, where that is
    knowable: not denied, allowed, and a built-in unless the agent has MCP servers (whose
    tools are only listed once they start). An error: no call could ever meet it.
    """
    who = routine.get("assignee")
    if not isinstance(who, str) or not isinstance(agents.get(who), dict):
        return
    agent = agents[who]
    tools = _as_dict(agent.get("tools"))
    allow = tools.get("allow")
    given_deny = tools.get("deny")
    deny: list[Any] = given_deny if isinstance(given_deny, list) else []
    has_servers = bool(_as_dict(agent.get("mcp_servers")))
    raw = routine.get("done_when")
    for i, cond in enumerate(raw if isinstance(raw, list) else []):
        tool = cond.get("tool") if isinstance(cond, dict) else None
        if not isinstance(tool, str) or not tool:
            continue
        path: Path_ = (*rp, "done_when", i, "tool")
        if tool in deny:
            rep.add(
                path,
                f"tool {tool!r} is in {who!r}'s tools.deny, so no call of it can succeed; "
                "remove it from deny, or from done_when",
            )
        elif isinstance(allow, list) and tool not in allow:
            rep.add(
                path,
                f"tool {tool!r} is not in {who!r}'s tools.allow "
                f"({', '.join(map(str, allow)) or 'empty'}), so no call of it can succeed; "
                "add it to allow, or fix the name",
            )
        elif not has_servers and tool not in MEMORY_TOOLS | OPTIONAL_BUILTINS:
            known = sorted(MEMORY_TOOLS | OPTIONAL_BUILTINS)
            close = closest(tool, known)
            hint = f"did you mean {close[0]!r}? " if close else ""
            rep.add(
                path,
                f"expected one of {who!r}'s tools, got {tool!r}; {hint}{who!r} has no "
                f"mcp_servers, so its tools are the built-in ones ({', '.join(known)}); add "
                "the MCP server that provides it, or fix the name",
            )


def _departments(value: Any, path: Path_, rep: Report) -> dict[str, Path_]:
    """Every department slug in the (nested) tree → its path; a slug used twice is an error
    (agents name departments by slug alone).
    """
    found: dict[str, Path_] = {}

    def walk(node: Any, at: Path_) -> None:
        if not isinstance(node, dict):
            return
        for slug, dept in node.items():
            dpath = (*at, slug)
            if slug in found:
                rep.add(
                    dpath,
                    f"expected department names to be unique across the tree, got {slug!r} "
                    f"again (first at {dotted(found[slug])}); rename one",
                    key=True,
                )
                continue
            found[slug] = dpath
            if isinstance(dept, dict):
                walk(dept.get("departments"), (*dpath, "departments"))

    walk(value, path)
    return found


def _check_org_chart(agents: dict[str, Any], rep: Report) -> None:
    """reports_to must form one tree: exactly one root and no cycles. Skipped when an
    agent or a reports_to value is malformed (that is already reported; guessing the
    chart from the rest would only add noise).
    """
    boss: dict[str, str | None] = {}
    for slug, a in agents.items():
        if not isinstance(a, dict):
            return
        b = a.get("reports_to")
        if b is not None and not isinstance(b, str):
            return
        boss[slug] = b if b in agents and b != slug else None if b is None else "?"
    if not boss:
        return
    roots = [s for s, b in boss.items() if b is None]
    if len(roots) > 1:
        rep.add(
            ("agents", roots[1]),
            f"expected exactly one agent without 'reports_to' (the root of the org chart), "
            f"got {len(roots)}: {', '.join(roots[:8])}"
            + (f" and {len(roots) - 8} more" if len(roots) > 8 else "")
            + "; make all but one report to someone",
            key=True,
        )
    reported: set[str] = set()
    for start in boss:
        seen: list[str] = []
        cur: str | None = start
        while cur is not None and cur in boss and cur not in seen:
            seen.append(cur)
            cur = boss[cur]
        if cur is not None and cur in seen:
            cycle = seen[seen.index(cur) :]
            if reported & set(cycle):
                continue
            reported.update(cycle)
            chain = " -> ".join([*cycle, cur])
            rep.add(
                ("agents", cycle[0], "reports_to"),
                f"expected reports_to to form a tree, got a cycle: {chain}; break it by "
                "making one of them report to someone outside it",
            )
    if not roots and not reported:
        rep.add(
            ("agents",),
            "expected exactly one agent without 'reports_to' (usually the CEO), got none",
            key=True,
        )


def _check_deliveries(data: dict[str, Any], rep: Report) -> None:
    """A routine that delivers to Telegram (``telegram`` or ``digest``, written or by
    default with an ``expected_output``) while company.yaml configures no
    ``alerts.telegram`` is a warning at the line that says so: its results would reach no
    phone (they are kept in the founder's inbox instead).
    """
    if isinstance(_as_dict(data.get("alerts")).get("telegram"), dict):
        return
    for slug, r in _as_dict(data.get("routines")).items():
        if not isinstance(r, dict):
            continue
        deliver = r.get("deliver")
        if isinstance(deliver, list):
            channels = [d for d in deliver if d in ("telegram", "digest")]
            path: Path_ = ("routines", slug, "deliver")
            said = f"deliver: lists {', '.join(channels)}"
        elif deliver is None and r.get("expected_output"):
            channels = ["telegram"]
            path = ("routines", slug, "expected_output")
            said = "with an expected_output, its result goes to telegram by default"
        else:
            continue
        if not channels or rep.is_settled(path):
            continue
        rep.warn(
            path,
            f"routine {slug!r}: {said}, but company.yaml configures no alerts.telegram: its "
            "results would reach no phone (they are kept in the inbox, `companyd inbox`); "
            "add alerts.telegram (docs/alerts.md) or set deliver: to file or memory",
        )


def _check_webhook_deliveries(data: dict[str, Any], rep: Report) -> None:
    """``deliver: [webhook:NAME]`` must name a webhook of ``alerts.webhooks``: an error at
    the entry, naming the configured ones.
    """
    hooks = _as_dict(data.get("alerts")).get("webhooks")
    hooks = hooks if isinstance(hooks, list) else []
    names = [h["name"] for h in hooks if isinstance(h, dict) and isinstance(h.get("name"), str)]
    for slug, r in _as_dict(data.get("routines")).items():
        deliver = _as_dict(r).get("deliver")
        if not isinstance(deliver, list):
            continue
        for i, to in enumerate(deliver):
            if not isinstance(to, str) or not to.startswith("webhook:"):
                continue
            path: Path_ = ("routines", slug, "deliver", i)
            name = to.partition(":")[2]
            if name in names or rep.is_settled(path):
                continue
            close = closest(name, names)
            hint = f"did you mean 'webhook:{close[0]}'? " if close else ""
            known = ", ".join(names) if names else "none is configured"
            rep.add(
                path,
                f"expected webhook:NAME with NAME a webhook of alerts.webhooks, got {to!r}; "
                f"{hint}alerts.webhooks: {known} — add it there (docs/webhooks.md) or fix "
                "the name",
            )


def _check_models(data: dict[str, Any], rep: Report) -> None:
    """Unknown model ids are warnings: they still run, priced at the dearest known rate."""
    pricing = set(_as_dict(data.get("pricing")))

    def check(value: Any, path: Path_) -> None:
        ids: list[tuple[Any, Path_]] = []
        if isinstance(value, str):
            ids.append((value, path))
        elif isinstance(value, dict):
            ids.append((value.get("primary"), (*path, "primary")))
            fallbacks = value.get("fallbacks")
            if isinstance(fallbacks, list):
                ids.extend((f, (*path, "fallbacks", i)) for i, f in enumerate(fallbacks))
        for mid, mpath in ids:
            if not isinstance(mid, str) or not mid or rep.is_settled(mpath):
                continue
            if len(mid.split()) > 1:  # no model id has a space: two lines YAML joined
                rep.add(
                    mpath,
                    f"expected a model id such as claude-sonnet-5-5 (no spaces), got {mid!r}; "
                    "write a list of models one '- id' per line, each at the same indentation",
                )
                continue
            bare = bare_model_id(mid)
            if is_known_model(bare) or bare in pricing or mid in pricing:
                continue
            provider = mid.split("/", 1)[0] if "/" in mid else None
            if provider is not None and provider != "anthropic":
                rep.warn(
                    mpath,
                    f"model {mid!r} names the provider {provider!r}, but companyd calls only "
                    "Anthropic's Messages API: this model will fail at run time; use a "
                    "Claude model id",
                )
                continue
            rep.warn(
                mpath,
                f"unknown model id {mid!r}: it will be priced at the most expensive known "
                "rate; check the spelling, or add its price under 'pricing'",
            )

    check(_as_dict(data.get("defaults")).get("model"), ("defaults", "model"))
    for slug, a in _as_dict(data.get("agents")).items():
        if isinstance(a, dict) and "model" in a:
            check(a["model"], ("agents", slug, "model"))


def _read_instructions(ref: str, path: Path_, base: Path, rep: Report) -> str | None:
    try:
        f = (base / Path(ref).expanduser()) if ref.strip() else base
        text = read_regular_file(f, _MAX_INSTRUCTIONS_BYTES).decode("utf-8")
        if not text.strip():
            rep.add(path, f"expected instructions in {ref!r}, got an empty file; write them")
            return None
        return text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text() did
    except FileTooLarge:
        rep.add(
            path,
            f"expected instructions of at most {_MAX_INSTRUCTIONS_BYTES // _MB} MB in {ref!r}, "
            "got a larger file; check the path",
        )
    except FileNotFoundError:
        rep.add(
            path,
            f"expected an existing file, got {ref!r} (looked for {f}); create it or fix the "
            "path (relative to company.yaml)",
        )
    except IsADirectoryError:
        rep.add(path, f"expected a file, got the directory {ref!r} ({f})")
    except NotRegularFile as exc:
        rep.add(
            path,
            f"expected a regular file of instructions, got {exc.kind}: {ref!r} ({f}); point "
            "instructions_file at a text file (relative to company.yaml)",
        )
    except UnicodeDecodeError as exc:
        data = exc.object[: exc.start]
        line = data.count(b"\n") + 1
        col = exc.start - (data.rfind(b"\n") + 1) + 1
        rep.add(
            path,
            f"expected UTF-8 text in {ref!r} ({f}), got the byte 0x{exc.object[exc.start]:02x} "
            f"at line {line}, column {col}; save the file as UTF-8 (in most editors: 'Save "
            "with encoding')",
        )
    except OSError as exc:
        rep.add(path, f"cannot read {ref!r} ({f}): {exc.strerror or exc}")
    except (ValueError, RuntimeError) as exc:  # a NUL byte; `~user` with no such user
        rep.add(
            path,
            f"cannot use {ref!r} as a path ({exc}); fix the path (relative to company.yaml)",
        )
    return None


def check_colleague_waits(spec: CompanyFile, rep: Report) -> None:
    """A colleague whose run may wait for the founder longer than its asker waits for it
    is a warning at the line that lets the asker reach it (its ``consult`` entry, or its
    ``reports_to`` for ``delegate``): past the asker's wait the colleague's task is
    withdrawn and what it asked the founder is closed unanswered (docs/desk.md). Runs on
    the validated file (durations are seconds by then); a warning, not an error: the file
    ran yesterday, and a founder who answers quickly never meets it.

    The asker waits ``colleague_timeout_seconds``, and its run's ``limits.max_seconds``
    counts that wait too; the colleague waits its ``approval_timeout`` for an approval of
    a tool in its ``require_approval`` (its own and ``defaults.tools``'), or of any tool of
    an MCP server with ``risk: always_ask``, and for an ``ask_founder`` answer at most its
    ``approval_timeout`` and its own ``max_seconds`` — or, itself waiting for a colleague
    that waits for the founder, as long as it waits for that one. Tools that ask by their
    MCP annotations are known only once their server runs, so they are not counted here.
    """
    agents = spec.agents
    # Kept from the first computation, which leaves out a path back through the agents
    # then on the stack (a cycle, refused at run time): linear in the org chart, where a
    # search of every path would not be.
    memo: dict[str, tuple[float, str, str] | None] = {}

    def held(slug: str, stack: tuple[str, ...]) -> tuple[float, str, str] | None:
        """How long a run of ``slug`` may be held by the founder, why, and whose
        ``approval_timeout`` bounds it; None if never.
        """
        if slug in memo:
            return memo[slug]
        best = _founder_wait(slug, agents[slug], spec)
        waits = _colleague_wait(agents[slug], spec)[0]
        for other in _reachable(slug, agents):
            if other in stack:
                continue  # a cycle: refused at run time
            sub = held(other, (*stack, slug))
            if sub is not None and (best is None or min(waits, sub[0]) > best[0]):
                best = (
                    min(waits, sub[0]),
                    f"may wait up to {_span(min(waits, sub[0]))} for {other!r}, whose run "
                    + sub[1],
                    sub[2],
                )
        memo[slug] = best
        return best

    for asker_slug, asker in agents.items():
        if not asker.enabled:
            continue
        waits, given, max_seconds = _colleague_wait(asker, spec)
        limits_key = f"agents.{asker_slug}.limits" if asker.limits else "defaults.limits"
        for slug, (path, how) in _reachable(asker_slug, agents).items():
            asks = held(slug, (asker_slug,))
            if asks is None or waits >= asks[0]:
                continue
            founder_waits, why, owner = asks
            bound = f"agents.{asker_slug}.colleague_timeout_seconds: {_span(given)}" + (
                "" if "colleague_timeout_seconds" in asker.model_fields_set else ", the default"
            )
            fix = f"agents.{asker_slug}.colleague_timeout_seconds"
            if max_seconds is not None and max_seconds < founder_waits:
                # the asking run's max_seconds counts its wait for a colleague: raising the
                # timeout alone would not do
                bound += f"; {limits_key}.max_seconds: {_span(max_seconds)} counts the wait too"
                fix += f" and {limits_key}.max_seconds"
            rep.warn(
                path,
                f"{asker_slug!r} may {how} {slug!r}, whose run {why}, but {asker_slug} waits "
                f"for a colleague only {_span(waits)} ({bound}): unless you answer within "
                f"{_span(waits)}, {asker_slug} goes on without {slug}'s work, {slug}'s run is "
                "withdrawn and what was asked of you is closed unanswered; set "
                f"{fix} to at least {_span(founder_waits)}, or "
                f"agents.{owner}.tools.approval_timeout to at most {_span(waits)}",
            )


def check_budgets_cover_a_call(spec: CompanyFile, rep: Report) -> None:
    """A daily or monthly budget smaller than the least one model call of an agent can cost
    — its ``model.max_output_tokens`` at its primary model's output price, before a single
    input token — is a warning at that budget (the agent's own, the defaults' naming the
    agents that use them, or the company's naming the agents it cannot serve). The spend
    book sets each call's worst case aside before sending it (docs/spend.md), so every call
    of such an agent is refused with nothing spent, and the founder reads "reached its daily
    budget: $0.00 of $0.05". A warning, not an error: a budget is the founder's to set, and
    the file ran yesterday.
    """
    from decimal import Decimal

    from companyd.llm import PriceTable

    table = PriceTable.from_config(spec.pricing)
    floors: dict[str, tuple[Decimal, str]] = {}  # agent → (least cost of a call, how)
    for slug, agent in spec.agents.items():
        if not agent.enabled:
            continue
        model = agent.model or spec.defaults.model
        price, _ = table.lookup(model.primary)
        prompt = input_floor(agent.instructions, spec.company.context)
        # each part to four decimals, rounded down: still a floor, and the parts said add
        # up to the total said
        out_cost = _floor4(price.worst_case(0, model.max_output_tokens))
        in_cost = _floor4(price.worst_case(prompt, model.max_output_tokens)) - out_cost
        in_cost = max(in_cost, Decimal(0))
        floors[slug] = (
            out_cost + in_cost,
            f"{model.max_output_tokens:,} output tokens, {_down(out_cost)}, and at least "
            f"{prompt:,} input tokens for its instructions and tools, "
            f"{_down(in_cost)}, at {model.primary}'s prices",
        )
    periods = (("daily_usd", "daily"), ("monthly_usd", "monthly"))
    by_defaults: dict[str, list[str]] = {}
    for slug, (floor, _) in floors.items():
        own = spec.agents[slug].budget
        budget = own or spec.defaults.budget
        if budget is None or budget.unlimited:
            continue
        for key, word in periods:
            limit = getattr(budget, key)
            if limit is None or Decimal(str(limit)) >= floor:
                continue
            if own is None:
                by_defaults.setdefault(key, []).append(slug)
            else:
                path = ("agents", slug, "budget", key)
                _budget_too_small(rep, path, f"{slug}'s {word} budget", limit, [slug], floors)
    for key, slugs in by_defaults.items():
        limit = getattr(spec.defaults.budget, key)  # not None: it was compared above
        name = f"the default {dict(periods)[key]} budget"
        _budget_too_small(rep, ("defaults", "budget", key), name, limit, slugs, floors)
    company = spec.company.budget
    for key, word in periods if not company.unlimited else ():
        limit = getattr(company, key)
        short = [s for s, (f, _) in floors.items() if limit is not None and Decimal(str(limit)) < f]
        if short:
            name = f"the company's {word} budget"
            _budget_too_small(rep, ("company", "budget", key), name, limit, short, floors)


def _floor4(usd: Decimal) -> Decimal:
    """``usd`` to four decimals, rounded down: what a floor may say."""
    from decimal import ROUND_FLOOR, Decimal

    return usd.quantize(Decimal("0.0001"), rounding=ROUND_FLOOR)


def _down(usd: Decimal) -> str:
    """A least cost to four decimals, rounded down (``$0.0613``): what it says is a floor."""
    from companyd.admin import format_usd

    return format_usd(_floor4(usd), 4)


#: The least the tools offered to every agent add to a call's input, in bytes of their
#: definitions as the API gets them: the memory family (agents._tools.memory_tools,
#: 4,275 bytes; tests/config/test_budget_checks.py keeps this at or under it, so the
#: warning never fires for a call that would fit).
TOOLS_FLOOR_BYTES = 4_000


def input_floor(instructions: str | None, context: str | None) -> int:
    """The fewest input tokens any call of an agent is reserved for before it is sent
    (:func:`companyd.llm.estimate_input_tokens`, which counts a byte as a token): its
    instructions and the company's context in the system prompt, the memory tools, one
    message and the request's own overhead — less than the real prompt, never more.
    """
    from companyd.llm import least_input_tokens

    text = (instructions or "") + (context or "")
    return least_input_tokens(len(text.encode("utf-8")), TOOLS_FLOOR_BYTES)


def _budget_too_small(
    rep: Report,
    path: Path_,
    name: str,
    limit: float,
    slugs: list[str],
    floors: dict[str, tuple[Decimal, str]],
) -> None:
    """The warning of :func:`check_budgets_cover_a_call` at ``path``: budget ``name`` of
    ``limit`` dollars holds no call of ``slugs`` (``floors``: each one's least call).
    """
    from companyd.admin import one_usd

    who = ", ".join(slugs)
    least = min(floors[s][0] for s in slugs)
    cost = (
        f"{_down(least)}: {floors[slugs[0]][1]}" if len(slugs) == 1 else f"at least {_down(least)}"
    )
    rep.warn(
        path,
        f"{name} of {one_usd(limit)} is less than one call of {who} can cost ({cost}); a "
        "call's worst case is set aside before it is sent, so every "
        f"call of {who} would be refused with nothing spent; raise the budget, or lower "
        "model.max_output_tokens",
    )


def _reachable(asker_slug: str, agents: dict[str, AgentSpec]) -> dict[str, tuple[Path_, str]]:
    """The enabled colleagues ``asker_slug`` may consult or delegate to → the line that
    lets it (its ``consult`` entry, or the colleague's ``reports_to``) and how.
    """
    asker = agents[asker_slug]
    reach: dict[str, tuple[Path_, str]] = {}
    if _may_call(asker, "delegate"):
        for slug, a in agents.items():
            if a.reports_to == asker_slug and a.enabled:
                reach[slug] = (("agents", slug, "reports_to"), "delegate to")
    if _may_call(asker, "consult"):
        for i, slug in enumerate(asker.consult):
            if slug in agents and agents[slug].enabled and slug != asker_slug:
                how = "consult and delegate to" if slug in reach else "consult"
                reach[slug] = (("agents", asker_slug, "consult", i), how)
    return reach


def _colleague_wait(agent: AgentSpec, spec: CompanyFile) -> tuple[float, float, float | None]:
    """How long ``agent`` waits for a colleague: ``(in effect, colleague_timeout_seconds,
    its run's max_seconds)``.
    """
    given = agent.colleague_timeout_seconds
    max_seconds = (agent.limits or spec.defaults.limits).max_seconds
    return (given if max_seconds is None else min(given, max_seconds)), given, max_seconds


def _may_call(agent: AgentSpec, tool: str) -> bool:
    """Whether ``agent``'s tools.allow and tools.deny let it call ``tool``."""
    allow = agent.tools.allow
    return tool not in agent.tools.deny and (allow is None or tool in allow)


def _founder_wait(slug: str, agent: AgentSpec, spec: CompanyFile) -> tuple[float, str, str] | None:
    """How long one run of ``agent`` (``slug``) may wait for the founder, why (naming the
    keys that say so) and ``slug`` — or None if none of its tools asks the founder.
    """
    d = spec.defaults.tools
    own = agent.tools.approval_timeout
    timeout = own or d.approval_timeout
    timeout_key = (
        f"agents.{slug}.tools.approval_timeout: {_span(own)}"
        if own
        else f"defaults.tools.approval_timeout: {_span(d.approval_timeout)}"
    )
    has_servers = bool(agent.mcp_servers)
    keys: list[str] = []
    asking: list[str] = []
    for where, listed in (
        (f"agents.{slug}.tools.require_approval", agent.tools.require_approval),
        ("defaults.tools.require_approval", d.require_approval),
    ):
        # a tool the agent cannot call (denied, not allowed, no server to provide it) asks
        # nothing
        names = [
            t
            for t in listed
            if t not in asking
            and _may_call(agent, t)
            and (has_servers or t in MEMORY_TOOLS | OPTIONAL_BUILTINS)
        ]
        if names:
            asking += names
            keys.append(where)
    for name, server in agent.mcp_servers.items():
        if server.risk == "always_ask":
            asking.append(f"the {name} server's tools")
            keys.append(f"agents.{slug}.mcp_servers.{name}.risk: always_ask")
    found: list[tuple[float, str]] = []
    if asking:
        found.append(
            (
                timeout,
                f"waits up to {_span(timeout)} for your approval of {', '.join(asking)} "
                f"({'; '.join([*keys, timeout_key])})",
            )
        )
    if agent.tools.ask_founder and _may_call(agent, "ask_founder"):
        limit = (agent.limits or spec.defaults.limits).max_seconds
        limit_key = f"agents.{slug}.limits" if agent.limits else "defaults.limits"
        bound = timeout if limit is None else min(timeout, limit)
        found.append(
            (
                bound,
                f"waits up to {_span(bound)} for your answers to its ask_founder questions "
                f"(agents.{slug}.tools.ask_founder; {timeout_key}"
                + (f"; {limit_key}.max_seconds: {_span(limit)})" if bound != timeout else ")"),
            )
        )
    return (*max(found, key=lambda f: f[0]), slug) if found else None


def _span(seconds: float | None) -> str:
    """``seconds`` as company.yaml writes a duration: ``5m``, ``24h``, ``1h30m``, ``3d``."""
    if seconds is not None and seconds != round(seconds):
        return f"{seconds:g}s"  # a fraction of a second (a test's 0.5 s): as written
    s = round(seconds or 0)
    if s >= 2 * 86400 and s % 86400 == 0:
        return f"{s // 86400}d"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, s = divmod(s, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"
