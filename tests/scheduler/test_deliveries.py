"""Where an ok fire's result goes (scheduler/_fire.py ``after_approval``), on resolved
company.yaml routines.
"""

from __future__ import annotations

from companyd.config import load_config_text
from companyd.scheduler._fire import after_approval

COMPANY = """\
schema: companyd/v1
company: {name: Acme, budget: {daily_usd: 5}}
agents: {ceo: {title: CEO, instructions: Lead.}}
routines:
  post:
    assignee: ceo
    description: Write the post.
    expected_output: The post.
    trigger: {cron: "0 14 * * *"}
  gated:
    assignee: ceo
    description: Write the newsletter.
    expected_output: The newsletter.
    trigger: {cron: "0 9 1 * *"}
    approval: required
    deliver: [telegram, file, memory]
"""


def test_an_approved_result_is_not_sent_again_but_kept_where_it_says() -> None:
    cfg = load_config_text(COMPANY, file="c.yaml")
    assert after_approval(cfg.routines["post"]) == ("telegram",)
    # the approval message showed it: after the Approve, only the other deliveries
    assert after_approval(cfg.routines["gated"]) == ("file", "memory")
