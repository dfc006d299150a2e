"""``Admin.ask`` with ``reply_to`` (issue 17): a follow-up in a run's thread, in process
with the offline model — the agent is shown the run's task, its result and the reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd.admin import AdminError
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm._offline import OfflineModel
from companyd.testing.daemon import short_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


@pytest.mark.anyio
async def test_a_follow_up_sees_the_task_its_result_and_the_reply(work: Path) -> None:
    cfg = load_config(EXAMPLE)
    async with Daemon(cfg, work / "s", backend=OfflineModel(), offline=True, oneoff=True) as d:
        first = await d.ask("cfo", "What did we spend on LLM calls this week?")
        assert first.status == "ok"
        run_id = first.run_id

        follow = await d.ask("cfo", "And per agent?", reply_to=run_id)
        assert follow.status == "ok"
        turn = await d.journal.turn(follow.run_id)
        assert turn is not None
        task, status, _ = turn
        assert status == "ok" and task.reply_to == run_id
        assert "What did we spend on LLM calls this week?" in task.prompt  # the task
        assert first.answer.strip() in task.prompt  # its result
        assert task.prompt.index("The founder replies:\nAnd per agent?") > 0  # the reply

        with pytest.raises(AdminError, match=r"is cfo's, not ceo's; .*ask cfo --reply-to"):
            await d.ask("ceo", "Anything?", reply_to=run_id)
        with pytest.raises(AdminError, match=r"no run 'run-000000000000'.*companyd runs"):
            await d.ask("cfo", "Anything?", reply_to="run-000000000000")
