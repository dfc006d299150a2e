"""Cross-checks (config/_checks.py): instruction files, CrewAI role and goal, and the
findings that are warnings rather than errors.
"""

from __future__ import annotations

from pathlib import Path

from companyd.config import load_config

from .configkit import MINIMAL, errors, load

# -- instruction files -----------------------------------------------------------------


def test_instructions_file_is_loaded_relative_to_the_company_file(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "cfo.md").write_text("You own the cash.\n", encoding="utf-8")
    f = tmp_path / "company.yaml"
    f.write_text(
        MINIMAL.replace("instructions: Count.", "instructions_file: agents/cfo.md"),
        encoding="utf-8",
    )
    cfg = load_config(f)
    assert cfg.agents["cfo"].instructions == "You own the cash.\n"


def test_instructions_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "cfo.md").write_bytes(b"Cash first.\ncaf\xe9")
    lines = errors(MINIMAL.replace("instructions: Count.", "instructions_file: cfo.md"), tmp_path)
    assert lines == [
        f"c.yaml:12:24: agents.cfo.instructions_file: expected UTF-8 text in 'cfo.md' "
        f"({tmp_path / 'cfo.md'}), got the byte 0xe9 at line 2, column 4; save the file as "
        "UTF-8 (in most editors: 'Save with encoding')"
    ]


def test_instructions_file_far_larger_than_any_prompt_is_an_error(tmp_path: Path) -> None:
    with (tmp_path / "cfo.md").open("wb") as out:
        out.truncate(64 * 1024 * 1024)
    lines = errors(MINIMAL.replace("instructions: Count.", "instructions_file: cfo.md"), tmp_path)
    assert lines == [
        "c.yaml:12:24: agents.cfo.instructions_file: expected instructions of at most 1 MB in "
        "'cfo.md', got a larger file; check the path"
    ]


def test_crewai_role_and_goal_become_instructions() -> None:
    cfg = load(
        MINIMAL.replace(
            "instructions: Count.",
            "role: Finance lead\n    goal: Keep runway above 12 months\n    backstory: Ex-banker.",
        )
    )
    assert cfg.agents["cfo"].instructions == (
        "Role: Finance lead\nGoal: Keep runway above 12 months\nEx-banker."
    )


# -- warnings --------------------------------------------------------------------------


def test_unknown_model_is_a_warning_not_an_error() -> None:
    cfg = load(MINIMAL + "    model: {primary: claude-nova-9, fallbacks: [openai/gpt-4o]}\n")
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:13:22: warning: agents.cfo.model.primary: unknown model id 'claude-nova-9': it "
        "will be priced at the most expensive known rate; check the spelling, or add its "
        "price under 'pricing'",
        "c.yaml:13:49: warning: agents.cfo.model.fallbacks.0: model 'openai/gpt-4o' names the "
        "provider 'openai', but companyd calls only Anthropic's Messages API: this model will "
        "fail at run time; use a Claude model id",
    ]


def test_a_routine_of_a_disabled_agent_is_a_warning_not_an_error() -> None:
    # Switching an agent off must not make yesterday's file refuse to start or reload.
    cfg = load(
        MINIMAL
        + "    enabled: false\n"
        + "routines:\n"
        + "  close:\n"
        + "    assignee: cfo\n"
        + "    description: Close the month.\n"
        + "    trigger: {cron: '0 8 1 * *'}\n"
        + "  paused:\n"
        + "    assignee: cfo\n"
        + "    description: Off with its agent.\n"
        + "    trigger: {every: 1h}\n"
        + "    enabled: false\n"
    )
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:16:15: warning: routines.close.assignee: assignee 'cfo' has `enabled: false`: "
        "every fire of this routine will be cancelled; enable the agent, or set "
        "`enabled: false` on this routine too",
    ]


def test_an_alert_route_for_an_unknown_event_kind_is_a_warning_naming_the_known_ones() -> None:
    # the event catalog is imported only for a file with alert routes (issue 31: `validate`
    # of a file without them does without it): the kinds are still checked when there are
    cfg = load(
        MINIMAL + "alerts:\n  routes:\n    routine_failed: critical\n    routine_faild: info\n"
    )
    [warning] = [str(w) for w in cfg.warnings]
    assert warning.startswith(
        "c.yaml:16:5: warning: alerts.routes.routine_faild: expected a known event kind, got "
        "'routine_faild'; did you mean 'routine_failed'? this route applies only if something "
        "publishes that kind (known: run_started, "
    )
    assert ", routine_failed, " in warning


def test_a_priced_model_is_known() -> None:
    cfg = load(
        MINIMAL + "    model: claude-nova-9\npricing:\n  claude-nova-9: {input: 1, output: 2}\n"
    )
    assert cfg.warnings == ()


def test_a_routine_delivering_to_telegram_without_telegram_is_a_warning_at_its_line() -> None:
    """Issue 28: `validate` says when a routine's results would reach no phone — written
    (`deliver: [telegram]`, `[digest]`) or by default (an expected_output) — at that line.
    """
    routines = (
        "routines:\n"
        "  daily-post:\n"
        "    assignee: cfo\n"
        "    description: Draft the post.\n"
        "    expected_output: One post.\n"
        "    trigger: {cron: '0 14 * * *'}\n"
        "  digest:\n"
        "    assignee: cfo\n"
        "    description: Sum up.\n"
        "    deliver: [file, digest]\n"
        "    trigger: {cron: '0 15 * * *'}\n"
        "  filed:\n"
        "    assignee: cfo\n"
        "    description: File it.\n"
        "    expected_output: A note.\n"
        "    deliver: [file]\n"
        "    trigger: {cron: '0 16 * * *'}\n"
    )
    cfg = load(MINIMAL + routines)
    warned = [str(w) for w in cfg.warnings]
    assert len(warned) == 2, warned
    assert warned[0].startswith(
        "c.yaml:17:22: warning: routines.daily-post.expected_output: routine 'daily-post': "
        "with an expected_output, its result goes to telegram by default, but company.yaml "
        "configures no alerts.telegram: its results would reach no phone"
    ), warned
    assert warned[1].startswith(
        "c.yaml:22:14: warning: routines.digest.deliver: routine 'digest': deliver: lists "
        "digest, but company.yaml configures no alerts.telegram"
    ), warned
    # with Telegram configured, nothing to warn about
    telegram = "alerts:\n  telegram: {bot_token_env: TOKEN, chat_ids: [1]}\n"
    assert load(MINIMAL + routines + telegram).warnings == ()


#: MINIMAL, with the CEO consulting the CFO (who also reports to it)
_CONSULTS = MINIMAL.replace("Lead.\n", "Lead.\n    consult: [cfo]\n")


def test_a_colleague_that_waits_for_the_founder_longer_than_its_asker_is_a_warning() -> None:
    """The defaults clash: an agent waits 5 min for a colleague (colleague_timeout_seconds),
    the colleague's approval waits 24 h (approval_timeout) — past 5 min the founder's Approve
    does nothing. Said at the line that lets the asker reach the colleague, with the keys
    and both ways out; a warning, the file still loads.
    """
    clash = (
        _CONSULTS
        + "    tools: {require_approval: [delete_entities]}\n"
        + "  cmo:\n    title: CMO\n    reports_to: ceo\n    instructions: Sell.\n"
        + "    tools: {ask_founder: true}\n"
        + "    limits: {max_seconds: 1h}\n"
    )
    assert [str(w) for w in load(clash).warnings] == [
        "c.yaml:9:15: warning: agents.ceo.consult.0: 'ceo' may consult and delegate to 'cfo', "
        "whose run waits up to 24h for your approval of delete_entities "
        "(agents.cfo.tools.require_approval; defaults.tools.approval_timeout: 24h), but ceo "
        "waits for a colleague only 5m (agents.ceo.colleague_timeout_seconds: 5m, the "
        "default; defaults.limits.max_seconds: 10m counts the wait too): unless you answer "
        "within 5m, ceo goes on without cfo's work, cfo's run is withdrawn and what was asked "
        "of you is closed unanswered; set agents.ceo.colleague_timeout_seconds and "
        "defaults.limits.max_seconds to at least 24h, or agents.cfo.tools.approval_timeout "
        "to at most 5m",
        "c.yaml:17:17: warning: agents.cmo.reports_to: 'ceo' may delegate to 'cmo', whose run "
        "waits up to 1h for your answers to its ask_founder questions "
        "(agents.cmo.tools.ask_founder; defaults.tools.approval_timeout: 24h; "
        "agents.cmo.limits.max_seconds: 1h), but ceo waits for a colleague only 5m "
        "(agents.ceo.colleague_timeout_seconds: 5m, the default; defaults.limits.max_seconds: "
        "10m counts the wait too): unless you answer within 5m, ceo goes on without cmo's "
        "work, cmo's run is withdrawn and what was asked of you is closed unanswered; set "
        "agents.ceo.colleague_timeout_seconds and defaults.limits.max_seconds to at least 1h, "
        "or agents.cmo.tools.approval_timeout to at most 5m",
    ]
    # either way out named in the message silences it
    waits_longer = clash.replace(
        "    consult: [cfo]\n",
        "    consult: [cfo]\n    colleague_timeout_seconds: 1d\n"
        "    limits: {max_cost_usd: 1, max_seconds: 1d}\n",
    )
    assert load(waits_longer).warnings == ()
    asks_shorter = clash.replace(
        "{require_approval: [delete_entities]}",
        "{require_approval: [delete_entities], approval_timeout: 5m}",
    ).replace("{ask_founder: true}", "{ask_founder: true, approval_timeout: 4m}")
    assert load(asks_shorter).warnings == ()
    # a wait shorter than a second is said as written, not rounded to "0s"
    brief = clash.replace(
        "    consult: [cfo]\n", "    consult: [cfo]\n    colleague_timeout_seconds: 0.5\n"
    )
    assert (
        "but ceo waits for a colleague only 0.5s (agents.ceo.colleague_timeout_seconds: 0.5s;"
        in (str(load(brief).warnings[0]))
    )


def test_a_colleague_held_by_its_own_colleague_counts_along_the_chain() -> None:
    """The CEO consults the CFO, who consults the accountant, whose tool needs approval:
    raising only the CFO's wait moves the clash to the CEO, and validate says so, naming
    the accountant's approval_timeout as the other way out.
    """
    chain = (
        _CONSULTS
        + "    consult: [acct]\n"
        + "  acct:\n    title: Accountant\n    reports_to: cfo\n    instructions: Book.\n"
        + "    tools: {require_approval: [delete_entities]}\n"
    )
    [first] = [w.path for w in load(chain).warnings]
    assert first == "agents.cfo.consult.0"  # the CEO's 5 min match the CFO's 5 min
    patient = chain.replace(
        "    consult: [acct]\n",
        "    consult: [acct]\n    colleague_timeout_seconds: 1d\n"
        "    limits: {max_cost_usd: 1, max_seconds: 1d}\n",
    )
    [moved] = [str(w) for w in load(patient).warnings]
    assert moved.startswith(
        "c.yaml:9:15: warning: agents.ceo.consult.0: 'ceo' may consult and delegate to 'cfo', "
        "whose run may wait up to 24h for 'acct', whose run waits up to 24h for your approval "
        "of delete_entities (agents.acct.tools.require_approval; "
        "defaults.tools.approval_timeout: 24h), but ceo waits for a colleague only 5m"
    ), moved
    assert moved.endswith("or agents.acct.tools.approval_timeout to at most 5m"), moved


def test_a_colleague_that_cannot_ask_the_founder_is_no_clash() -> None:
    """Only what can really wait for the founder counts: a tool the colleague cannot call
    (denied, or no server provides it), a colleague the asker cannot reach (its consult and
    delegate tools denied), or a disabled colleague.
    """
    base = _CONSULTS
    for tools in (
        "{require_approval: [delete_entities], deny: [delete_entities]}",
        "{require_approval: [fetch]}",  # no MCP server: there is no fetch tool
        "{allow: [search_nodes], ask_founder: true}",
    ):
        assert load(base + f"    tools: {tools}\n").warnings == (), tools
    needs = base + "    tools: {require_approval: [delete_entities]}\n"
    assert load(needs + "    enabled: false\n").warnings == ()
    unreachable = needs.replace(
        "    consult: [cfo]\n", "    consult: [cfo]\n    tools: {deny: [consult, delegate]}\n"
    )
    assert load(unreachable).warnings == ()
    # the company's default list counts, and a server that always asks does
    defaults = "defaults:\n  tools: {require_approval: [delete_entities]}\n"
    assert len(load(base + defaults).warnings) == 1
    server = "    mcp_servers:\n      crm: {command: crm-server, risk: always_ask}\n"
    [warning] = [str(w) for w in load(base + server).warnings]
    assert "of the crm server's tools (agents.cfo.mcp_servers.crm.risk: always_ask;" in warning


def test_a_budget_smaller_than_one_call_is_a_warning() -> None:
    """A budget below the least one call can cost (max_output_tokens at the model's output
    price, and the input no call goes without: the agent's instructions and the memory
    tools): the call's worst case is set aside first, so every call would be refused with
    nothing spent — the founder would read "reached its daily budget: $0.00 of $0.03".
    """
    own = load(
        MINIMAL.replace(
            "    instructions: Lead.",
            "    instructions: Lead.\n    budget: {daily_usd: 0.03, monthly_usd: 10}",
        )
    )
    assert [str(w) for w in own.warnings] == [
        "c.yaml:9:25: warning: agents.ceo.budget.daily_usd: ceo's daily budget of $0.03 is less "
        "than one call of ceo can cost ($0.0613: 4,096 output tokens, $0.0409, and at least "
        "5,109 input tokens for its instructions and tools, $0.0204, at claude-sonnet-5-5's "
        "prices); a call's worst case is set aside before it is sent, so every call of ceo "
        "would be refused with nothing spent; raise the budget, or lower "
        "model.max_output_tokens"
    ]
    # above the output alone ($0.041) but not the input too: every call was refused,
    # "budget exhausted" at $0.00 spent, and validate said nothing
    between = MINIMAL.replace("Lead.", "Lead.\n    budget: {daily_usd: 0.05}")
    (warning,) = load(between).warnings
    assert "ceo's daily budget of $0.05 is less than one call of ceo can cost ($0.0613" in str(
        warning
    )
    # the company's names the agents it cannot serve; the defaults' those that use them
    shared = load(
        MINIMAL.replace(
            "  budget: {daily_usd: 5}",
            "  budget: {daily_usd: 0.04}\ndefaults:\n  budget: {daily_usd: 1, monthly_usd: 0.02}"
            "\n  model: {primary: claude-opus-5, max_output_tokens: 8000}",
        )
    )
    assert [str(w) for w in shared.warnings] == [
        "c.yaml:4:23: warning: company.budget.daily_usd: the company's daily budget of $0.04 "
        "is less than one call of ceo, cfo can cost (at least $0.2510); a "
        "call's worst case is set aside before it is sent, so every call of ceo, cfo would "
        "be refused with nothing spent; raise the budget, or lower model.max_output_tokens",
        "c.yaml:6:39: warning: defaults.budget.monthly_usd: the default monthly budget of "
        "$0.02 is less than one call of ceo, cfo can cost (at least $0.2510); a call's worst "
        "case is set aside before it is sent, so every call of ceo, cfo would be refused "
        "with nothing spent; raise the budget, or lower model.max_output_tokens",
    ]
    # a budget that holds a call (and an unlimited one) says nothing
    assert load(MINIMAL).warnings == ()
    roomy = MINIMAL.replace("  budget: {daily_usd: 5}", "  budget: unlimited")
    assert load(roomy.replace("Lead.", "Lead.\n    budget: {daily_usd: 0.07}")).warnings == ()


def test_the_input_floor_of_a_budget_check_stays_under_the_real_tools() -> None:
    # the warning's least input must never exceed what a call really reserves: the memory
    # tools every agent is offered, as the API gets them, are at least TOOLS_FLOOR_BYTES
    import json

    from companyd.agents._tools import memory_tools
    from companyd.config._checks import TOOLS_FLOOR_BYTES

    api = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
        for t in memory_tools(None)  # type: ignore[arg-type]  # definitions only, no calls
    ]
    size = len(json.dumps(api, ensure_ascii=False).encode("utf-8"))
    assert TOOLS_FLOOR_BYTES <= size < TOOLS_FLOOR_BYTES * 1.25, size
