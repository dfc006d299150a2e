"""Evidence for "done": a run's final answer checked against what the run actually did.

companyd journals every step of every run, so before a run that ended its turn counts as
``ok`` its answer is checked against its own journaled steps (docs/agents.md,
"Verification"):

* a routine's ``done_when`` conditions (:mod:`companyd.config._done_when`), all of which
  must hold: a successful call of a tool (its result matching a pattern), a write to the
  company memory (to an entity), an answer matching a pattern, no longer than N characters,
  JSON valid against a schema;
* the **claim check**, for every run unless ``defaults.claim_check: false``: an answer that
  names one of the agent's tools, or says it saved something in the company memory, while
  the run has no successful call of that tool (no memory write) does not hold either.

:func:`evaluate` is pure: it takes the conditions, the answer, the run's tool calls
(:func:`calls_of` reads them from journaled steps) and the agent's tool names, and returns a
:class:`Verdict` — each condition met or unmet with its evidence or its reason in plain
words, and the follow-up to send the agent when it gets another chance (``on_unmet:
retry``). A run whose verdict is unmet ends ``unverified``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from companyd._frozen import Frozen
from companyd.llm import ToolResultBlock
from companyd.memory import MUTATING_TOOLS
from companyd.runs import Step, VerificationPayload

__all__ = [
    "CLAIM_CHECK_RULE",
    "Check",
    "ToolCall",
    "Verdict",
    "calls_of",
    "evaluate",
]

#: The claim check's rule, as docs/agents.md states it (a test keeps the two the same).
CLAIM_CHECK_RULE = (
    "A final answer is checked against its own run: a sentence that names one of the "
    "agent's tools whose name has a '_' or '-' in it (post_update, create_entities — never a "
    "plain word such as recall or consult) claims that tool was used, and a sentence with "
    "saved, stored, recorded, wrote, written, added, noted, logged, kept, remembered or "
    "updated and a mention of the (company) memory claims a memory write. A sentence with "
    "a negation (not, n't, no, nothing, never, cannot, unable, failed, without, error) "
    "claims "
    "nothing. A claim holds when the run has at least one successful call of that tool "
    "(for memory: of a tool that writes to the company memory)."
)

# The patterns stay strings, compiled at their first use by ``re``'s own cache of compiled
# patterns, not at import: the daemon imports this module at start and checks its first
# answer much later (issue 31).
_NEGATION = (
    r"(?i)\b(?:not|no|nothing|never|cannot|unable|failed|fails|failing|without|error|errors)\b"
    r"|n't\b"
)
_MEMORY_CLAIM = (
    r"(?i)\b(?:saved|stored|recorded|wrote|written|added|noted|logged|kept|remembered|updated)\b"
    r".*\b(?:company(?:'s)? memory|(?:in|into|to) (?:the )?memory|the memory)\b"
)
#: Words of an answer that say the work was done (quoted when a tool condition is unmet).
_DONE_WORD = (
    r"(?i)\b(posted|sent|published|saved|stored|recorded|created|updated|added|emailed|"
    r"scheduled|uploaded|submitted|filed|logged|done|completed|finished)\b"
)
_GENERIC_DONE = frozenset({"done", "completed", "finished"})
_SENTENCE = r"(?<=[.!?])\s+|\n+"
_FENCE = r"(?s)\A```[a-zA-Z]*\n(.*)\n```\Z"


class ToolCall(Frozen):
    """One tool call of a run, as journaled: its name and input, whether its result was an
    error, the result's text, and where it is (the ``tool_use`` id, the result's step).
    """

    tool_use_id: str
    name: str
    input: Mapping[str, Any]
    ok: bool
    result: str
    seq: int


class Check(Frozen):
    """One condition and whether it holds.

    Attributes:
        source: ``done_when`` (a routine's condition) or ``claim_check``.
        kind: the condition's kind (``tool``, ``memory_written``, ``output_matches``,
            ``output_max_chars``, ``output_json_schema``; ``claim`` for the claim check).
        condition: what must hold, in plain words.
        met: whether it holds.
        evidence: met — what shows it (e.g. the call and its result); unmet — why not,
            in plain words.
        tool_use_id: the tool call that is the evidence (None if none).
        seq: the journal step of that evidence.
        follow_up: unmet — what the agent is told when it gets another chance.
    """

    source: str
    kind: str
    condition: str
    met: bool
    evidence: str
    tool_use_id: str | None = None
    seq: int | None = None
    follow_up: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The check as journaled (``verification`` step) and shown (``runs show --json``)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "condition": self.condition,
            "met": self.met,
            "evidence": self.evidence,
            "tool_use_id": self.tool_use_id,
            "seq": self.seq,
        }


class Verdict(Frozen):
    """Every check of one final answer."""

    checks: tuple[Check, ...] = field(default=())

    @property
    def met(self) -> bool:
        """Whether every check holds (no checks: trivially)."""
        return all(c.met for c in self.checks)

    @property
    def reason(self) -> str:
        """Why the run is unverified: each unmet check's reason, in plain words."""
        return "; ".join(c.evidence for c in self.checks if not c.met)

    def follow_up(self) -> str:
        """The one message that gives the agent another chance (``on_unmet: retry``)."""
        missing = "\n".join(f"- {c.follow_up or c.evidence}" for c in self.checks if not c.met)
        return (
            "Before this counts as done, your answer was checked against what this run "
            f"actually did, and it does not hold:\n{missing}\n"
            "Do what is missing now, or say plainly that it could not be done."
        )

    def payload(self, *, attempt: int, follow_up: str | None) -> VerificationPayload:
        """The ``verification`` step's payload: the checks, the outcome and the follow-up
        sent (None: none; the run ends with this verdict).
        """
        return {
            "attempt": attempt,
            "met": self.met,
            "reason": self.reason,
            "checks": [c.to_dict() for c in self.checks],
            "follow_up": follow_up,
        }


def calls_of(steps: Iterable[Step]) -> list[ToolCall]:
    """The tool calls of a run's journaled steps that have a result, in order of result."""
    started: dict[str, tuple[str, Mapping[str, Any]]] = {}
    out: list[ToolCall] = []
    for s in steps:
        if s.kind in ("tool_start", "approval") and s.key:
            name = str(s.payload.get("name") or "")
            given = s.payload.get("input")
            started.setdefault(s.key, (name, given if isinstance(given, Mapping) else {}))
        elif s.kind == "tool_result" and s.key:
            name, given = started.get(s.key, ("", {}))
            result = s.tool_result()
            out.append(
                ToolCall(
                    tool_use_id=s.key,
                    name=name,
                    input=given,
                    ok=not result.get("is_error"),
                    result=result_text(result),
                    seq=s.seq,
                )
            )
    return out


def result_text(result: ToolResultBlock) -> str:
    """A tool result's content as text."""
    content = result.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def evaluate(
    conditions: Sequence[Mapping[str, Any]],
    answer: str,
    calls: Sequence[ToolCall],
    *,
    tools: Iterable[str] = (),
    claim_check: bool = True,
) -> Verdict:
    """Check ``answer`` and the run's ``calls`` against ``conditions`` (``done_when``) and,
    with ``claim_check``, the answer's claims of using one of ``tools`` (the agent's tool
    names) or of writing to the company memory.
    """
    checks = [_check(c, answer, calls) for c in conditions]
    if claim_check:
        covered = {str(c.get("tool")) for c in conditions if c.get("tool")}
        memory_covered = any(c.get("memory_written") for c in conditions)
        checks += _claims(answer, calls, set(tools) - covered, memory_covered)
    return Verdict(checks=tuple(checks))


def _quote(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _said_done(answer: str) -> str:
    """The word of ``answer`` that says the work was done: a specific one (``posted``)
    before a generic one (``done``); "" if none.
    """
    words = [str(w).lower() for w in re.findall(_DONE_WORD, answer)]
    specific = [w for w in words if w not in _GENERIC_DONE]
    return (specific or words or [""])[0]


def _check(cond: Mapping[str, Any], answer: str, calls: Sequence[ToolCall]) -> Check:
    if cond.get("tool"):
        return _tool_check(str(cond["tool"]), cond.get("result_matches"), answer, calls)
    if cond.get("memory_written"):
        return _memory_check(cond.get("entity"), calls)
    if cond.get("output_matches") is not None:
        pattern = str(cond["output_matches"])
        m = re.search(pattern, answer)
        return Check(
            source="done_when",
            kind="output_matches",
            condition=f"an answer matching /{pattern}/",
            met=m is not None,
            evidence=(
                f"the answer matches: {_quote(m.group(0))}"
                if m
                else f"the answer does not match /{pattern}/"
            ),
            follow_up=f"your answer must match /{pattern}/; give the whole answer again",
        )
    if cond.get("output_max_chars") is not None:
        limit = int(cond["output_max_chars"])
        n = len(answer)
        return Check(
            source="done_when",
            kind="output_max_chars",
            condition=f"an answer of at most {limit:,} characters",
            met=n <= limit,
            evidence=(
                f"the answer is {n:,} characters"
                if n <= limit
                else f"the answer is {n:,} characters, more than {limit:,}"
            ),
            follow_up=(
                f"your answer is {n:,} characters; the limit is {limit:,}: give the whole "
                "answer again, shorter"
            ),
        )
    return _json_check(cond.get("output_json_schema") or {}, answer)


def _tool_check(tool: str, pattern: Any, answer: str, calls: Sequence[ToolCall]) -> Check:
    mine = [c for c in calls if c.name == tool]
    good = [c for c in mine if c.ok]
    condition = f"a successful call of {tool}"
    if pattern is not None:
        condition += f" whose result matches /{pattern}/"
        matching = [c for c in good if re.search(str(pattern), c.result)]
    else:
        matching = good
    if matching:
        c = matching[0]
        return Check(
            source="done_when",
            kind="tool",
            condition=condition,
            met=True,
            evidence=f"{tool} succeeded: {_quote(c.result)}",
            tool_use_id=c.tool_use_id,
            seq=c.seq,
        )
    said = _said_done(answer)
    says = f"; the answer says {said!r}" if said else ""
    if good:
        why = (
            f"no result of {tool} matches /{pattern}/ (its last result: {_quote(good[-1].result)})"
        )
        ask = f"no call of {tool} returned a result matching /{pattern}/"
    elif mine:
        why = (
            f"no successful call of {tool}: {len(mine)} call(s) failed (the last: "
            f"{_quote(mine[-1].result)})"
        )
        ask = f"every call of {tool} failed"
    else:
        why = f"no successful call of {tool}"
        ask = f"no call of {tool} succeeded"
    follow = f"your answer says it was {said}, but {ask}" if said else ask
    last = (good or mine)[-1] if (good or mine) else None
    return Check(
        source="done_when",
        kind="tool",
        condition=condition,
        met=False,
        evidence=why + says,
        tool_use_id=last.tool_use_id if last else None,
        seq=last.seq if last else None,
        follow_up=follow,
    )


def entities_of(call: ToolCall) -> list[str]:
    """The names of the memory entities a memory write touches (from its input)."""
    args = call.input
    names: list[str] = []
    for e in args.get("entities") or []:
        if isinstance(e, Mapping) and e.get("name"):
            names.append(str(e["name"]))
    for key in ("observations", "deletions"):
        for o in args.get(key) or []:
            if isinstance(o, Mapping) and o.get("entityName"):
                names.append(str(o["entityName"]))
    for r in args.get("relations") or []:
        if isinstance(r, Mapping):
            names += [str(r[k]) for k in ("from", "to") if r.get(k)]
    names += [str(n) for n in args.get("entityNames") or [] if isinstance(n, str)]
    return names


def _memory_writes(calls: Sequence[ToolCall]) -> list[ToolCall]:
    return [c for c in calls if c.ok and c.name in MUTATING_TOOLS]


def _memory_check(entity: Any, calls: Sequence[ToolCall]) -> Check:
    writes = _memory_writes(calls)
    condition = "a write to the company memory"
    if entity is not None:
        condition += f" (entity {entity!r})"
        hits = [c for c in writes if str(entity) in entities_of(c)]
    else:
        hits = writes
    if hits:
        c = hits[0]
        touched = ", ".join(dict.fromkeys(entities_of(c))) or "?"
        return Check(
            source="done_when",
            kind="memory_written",
            condition=condition,
            met=True,
            evidence=f"{c.name} succeeded ({touched})",
            tool_use_id=c.tool_use_id,
            seq=c.seq,
        )
    if entity is not None and writes:
        other = ", ".join(dict.fromkeys(n for c in writes for n in entities_of(c)))
        why = f"no write to entity {entity!r} in the company memory (the run wrote to {other})"
    elif entity is not None:
        why = f"no write to entity {entity!r} in the company memory"
    else:
        why = "no write to the company memory"
    return Check(
        source="done_when",
        kind="memory_written",
        condition=condition,
        met=False,
        evidence=why,
        follow_up=why.replace("no write", "nothing was written", 1),
    )


def _json_check(schema: Mapping[str, Any], answer: str) -> Check:
    from jsonschema.exceptions import ValidationError
    from jsonschema.validators import validator_for

    condition = "an answer that is JSON valid against the schema"
    text = answer.strip()
    fenced = re.match(_FENCE, text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except ValueError as exc:
        why = f"the answer is not JSON ({exc})"
        return Check(
            source="done_when",
            kind="output_json_schema",
            condition=condition,
            met=False,
            evidence=why,
            follow_up=f"{why}: answer with the JSON alone",
        )
    validator = validator_for(schema)(schema)
    try:
        errors: list[ValidationError] = sorted(
            validator.iter_errors(data), key=lambda e: list(map(str, e.path))
        )
    except Exception as exc:  # e.g. a $ref to nowhere: only found when it is followed
        why = f"the schema could not be applied ({type(exc).__name__}: {str(exc)[:200]})"
        return Check(
            source="done_when",
            kind="output_json_schema",
            condition=condition,
            met=False,
            evidence=why + "; fix output_json_schema in company.yaml",
            follow_up=why,
        )
    if not errors:
        return Check(
            source="done_when",
            kind="output_json_schema",
            condition=condition,
            met=True,
            evidence="the answer is JSON valid against the schema",
        )
    first = errors[0]
    at = "/".join(str(p) for p in first.absolute_path)
    why = f"the answer's JSON does not match the schema: {first.message}" + (
        f" (at {at})" if at else ""
    )
    return Check(
        source="done_when",
        kind="output_json_schema",
        condition=condition,
        met=False,
        evidence=why,
        follow_up=f"{why}; answer with JSON that matches it",
    )


def _claims(
    answer: str, calls: Sequence[ToolCall], tools: set[str], memory_covered: bool
) -> list[Check]:
    """The claim check (:data:`CLAIM_CHECK_RULE`): one check per tool the answer names, and
    one for a memory claim.
    """
    sentences = [
        s for s in re.split(_SENTENCE, answer) if s.strip() and not re.search(_NEGATION, s)
    ]
    out: list[Check] = []
    named = sorted(
        t
        for t in tools
        if ("_" in t or "-" in t)
        and any(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", s) for s in sentences)
    )
    for tool in named:
        good = [c for c in calls if c.name == tool and c.ok]
        out.append(
            Check(
                source="claim_check",
                kind="claim",
                condition=f"the answer's claim of using {tool}",
                met=bool(good),
                evidence=(
                    f"{tool} succeeded: {_quote(good[0].result)}"
                    if good
                    else f"the answer names {tool}, but no call of {tool} succeeded in this run"
                ),
                tool_use_id=good[0].tool_use_id if good else None,
                seq=good[0].seq if good else None,
                follow_up=(
                    f"your answer names {tool}, but no call of {tool} succeeded in this run"
                ),
            )
        )
    if not memory_covered and any(re.search(_MEMORY_CLAIM, s) for s in sentences):
        writes = _memory_writes(calls)
        out.append(
            Check(
                source="claim_check",
                kind="claim",
                condition="the answer's claim of writing to the company memory",
                met=bool(writes),
                evidence=(
                    f"{writes[0].name} succeeded"
                    if writes
                    else "the answer says it saved to the company memory, but the run wrote "
                    "nothing to it"
                ),
                tool_use_id=writes[0].tool_use_id if writes else None,
                seq=writes[0].seq if writes else None,
                follow_up=(
                    "your answer says it saved something in the company memory, but no "
                    "memory write succeeded in this run"
                ),
            )
        )
    return out
