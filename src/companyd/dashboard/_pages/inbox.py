"""The Inbox page (``/inbox``): what waits for the founder, with its actions.

:meth:`~companyd.admin.Admin.inbox` lists, oldest first, the tool calls waiting for
approval (``ap-…``), the agents' questions (``q-…``), routine results awaiting approval
(``r-…``), the improver's proposals (with their diff, from ``proposals``) and the
quarantined tasks. Each item offers the actions the daemon says it takes:

* ``approve`` — ``Admin.approve``;
* ``reject`` with a reason — ``Admin.reject``;
* ``answer`` (a question) and ``changes`` (ask for changes to a result) with a text —
  ``Admin.answer``;
* ``retry`` (a quarantined task) — ``Admin.retry``.

Each is ``POST /inbox/{item_id}/{action}`` (CSRF-checked by the guard), done through
:func:`~companyd.dashboard._actions.perform` and so recorded "via dashboard". An htmx
request gets the decided item (its notice, or the refusal) to swap in place of the item; a
plain form post gets the inbox again with the notice on top (409 for a refusal: already
decided, unknown id — the daemon's message). An unknown action is a 400 naming the valid
ones.

The live fragment ``inbox`` (``/live?f=inbox&shown=N``) says how many items wait and, when
that differs from the ``N`` the page shows, offers to reload: the list itself is not
swapped under the founder's hands (a half-typed answer would be lost).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from companyd.admin import waiting_text
from companyd.dashboard._actions import VIA, Outcome, perform
from companyd.dashboard._context import ctx_of
from companyd.dashboard._live import Live
from companyd.dashboard._render import fragment, render

__all__ = ["ACTIONS", "GROUPS", "INBOX_KINDS", "live", "routes"]

#: The actions, with the form field each needs (None: none).
ACTIONS: dict[str, str | None] = {
    "approve": None,
    "reject": "reason",
    "answer": "text",
    "changes": "text",
    "retry": None,
}
#: How the page groups the items: (kind, heading).
GROUPS: tuple[tuple[str, str], ...] = (
    ("approval", "Tool calls waiting for approval"),
    ("question", "Questions"),
    ("result", "Results awaiting approval"),
    ("proposal", "Proposals"),
    ("quarantined", "Quarantined tasks"),
    ("tools", "New or changed tools held back"),
)


async def _groups(request: Request) -> list[dict[str, Any]]:
    """The inbox's items grouped as :data:`GROUPS` (empty groups left out), proposals with
    their diff.
    """
    ctx = ctx_of(request)
    admin = ctx.admin
    inbox = await admin.inbox()
    now = ctx.clock.time()
    # how long each item has waited and when it expires (then: denied)
    waiting = {i.id: waiting_text(i.created, i.deadline, now, i.kind) for i in inbox.items}
    diffs: dict[str, str] = {}
    if any(i.kind == "proposal" for i in inbox.items):
        diffs = {str(p["id"]): str(p.get("diff", "")) for p in (await admin.proposals()).proposals}
    known = {kind for kind, _ in GROUPS}
    groups = []
    for kind, heading in GROUPS:
        items = [i for i in inbox.items if i.kind == kind]
        if items:
            groups.append(
                {
                    "kind": kind,
                    "heading": heading,
                    "entries": items,
                    "diffs": diffs,
                    "waiting": waiting,
                }
            )
    rest = [i for i in inbox.items if i.kind not in known]
    if rest:
        groups.append(
            {
                "kind": "other",
                "heading": "Other",
                "entries": rest,
                "diffs": diffs,
                "waiting": waiting,
            }
        )
    return groups


#: The events after which the number of waiting items may have changed.
INBOX_KINDS = frozenset(
    {
        "founder_approval_requested", "founder_question", "founder_result_for_approval",
        "founder_decided", "proposal_created", "proposal_applied", "task_quarantined",
        "tools_quarantined", "operator_action",
    }
)  # fmt: skip


async def inbox_page(request: Request) -> Response:
    """Every item waiting for the founder, grouped, with its action forms."""
    groups = await _groups(request)
    return render(request, "inbox.html", groups=groups, outcome=None, **_shown(groups))


def _shown(groups: list[dict[str, Any]]) -> dict[str, int]:
    return {"shown": sum(len(g["entries"]) for g in groups)}


async def waiting(request: Request) -> str:
    """The live ``inbox`` fragment: how many items wait, against the ``shown`` query value."""
    count = len((await ctx_of(request).admin.inbox()).items)
    try:
        shown = int(request.query_params.get("shown", ""))
    except ValueError:
        shown = -1
    return fragment(request, "fragments/inbox_count.html", count=count, shown=shown)


async def act(request: Request) -> Response:
    """Do one action on one item (see the module docstring)."""
    item_id = request.path_params["item_id"]
    action = request.path_params["action"]
    if action not in ACTIONS:
        return HTMLResponse(
            f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}", status_code=400
        )
    form = await request.form()
    field = ACTIONS[action]
    text = str(form.get(field, "")).strip() if field else ""
    outcome = await _do(request, action, item_id, text)
    if "hx-request" in request.headers:
        # 200 either way: htmx swaps only successful answers, and a refusal is shown too
        html = fragment(request, "fragments/inbox_done.html", item_id=item_id, outcome=outcome)
        return HTMLResponse(html)
    groups = await _groups(request)
    return render(
        request,
        "inbox.html",
        status_code=200 if outcome.ok else 409,
        groups=groups,
        outcome=outcome,
        **_shown(groups),
    )


async def _do(request: Request, action: str, item_id: str, text: str) -> Outcome:
    # a decision keeps where it was made: the desk's record, the run's transcript line
    if action == "approve":
        return await perform(request, "approve", item_id, item_id=item_id, via=VIA)
    if action == "reject":
        return await perform(request, "reject", item_id, item_id=item_id, reason=text, via=VIA)
    if action == "retry":
        return await perform(request, "retry", item_id, task_id=item_id)
    if not text:
        what = "your answer" if action == "answer" else "the changes you want"
        return Outcome(ok=False, message=f"{item_id}: write {what} first")
    return await perform(request, "answer", item_id, item_id=item_id, text=text, via=VIA)


routes: list[BaseRoute] = [
    Route("/inbox", inbox_page, methods=["GET"], name="inbox"),
    Route("/inbox/{item_id}/{action}", act, methods=["POST"], name="inbox_act"),
]

live: list[Live] = [Live("inbox", INBOX_KINDS, waiting, 60.0)]
