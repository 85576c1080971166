"""A media item's steps and its guid's turns, against in-memory ports: an item on hold (its
job, shard or guid) takes no step for its media — no upload, no status poll, no wait that
would overwrite its reason — and an upload or poll that finds the media ready took the
guid's turn: the send is the guid's next call, one gap after that answer, never straight
after it."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import RetryPolicy
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import MediaMessage
from pacer_common.domain.status import ItemStatus
from pacer_common.gateway import MediaAnswer
from pacer_sender import core
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.media import MediaRow, media_hash
from pacer_sender.domain.pacing import Limits
from pacer_sender.ports import Begun

from .dispatching import BeforeCall, Recorder, cmd, dispatcher, now, ring, run_virtual, stop, until
from .fakes import FakeActionGateway, FakeGateway, InMemoryActions, InMemoryItemRepository

S = ItemStatus
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))
IMAGE = MediaMessage(type="image", url="https://cdn.example/p.png")


class World:
    """One guid's media items (job ``j``), the store and the gateway."""

    def __init__(self) -> None:
        self.repo = InMemoryItemRepository()
        self.actions = InMemoryActions(self.repo, {"j": IMAGE})
        self.gw = FakeActionGateway()
        self.executor = Executor(self.repo, FakeGateway(), owner="sender-1", retry=POLICY, rng=random.Random(0),
                                 actions=self.actions, action_gateway=self.gw)
        self.n = 0

    def item(self) -> ItemCommand:
        self.n += 1
        c = ItemCommand(item_id=f"it-{self.n}", job_id="j", shard_id=1, guid="g-1", to_id=f"room-{self.n}",
                        content="[image]", idem_key=f"j:g-1:room-{self.n}", priority=3, kind="campaign")
        self.repo.add(c.item_id)
        return c

    def run(self, c: ItemCommand) -> Executed:
        return asyncio.run(self.executor.execute(c))

    def pending_media(self, uploaded_s_ago: float) -> None:
        """The guid uploaded the image that long ago; the gateway has it ready, but has not
        said so yet (no callback, no poll)."""
        self.actions.records[("g-1", media_hash(IMAGE.url, IMAGE.type, IMAGE.fileName))] = MediaRow(
            "media-0", "pending", None, datetime.now(UTC) - timedelta(seconds=uploaded_s_ago), None)
        self.gw.media["media-0"] = (IMAGE.url, IMAGE.type, IMAGE.fileName)

    def steps(self) -> tuple[list[str], list[str], dict[str, tuple[datetime, str]]]:
        """Every upload, status poll and wait so far."""
        return self.gw.upload_keys, self.gw.polls, self.actions.waits


# -- holds before any media step ------------------------------------------------------------

HOLDS = {
    "its job paused": lambda w: w.repo.held_jobs.__setitem__("j", "job paused: by ops"),
    "its job awaiting approval": lambda w: w.repo.held_jobs.__setitem__("j", "job awaiting_approval"),
    "its guid paused": lambda w: w.repo.paused_guids.__setitem__("g-1", "by ops"),
}


@pytest.mark.parametrize("media", ["to upload", "to poll", "to wait for"])
@pytest.mark.parametrize("hold", list(HOLDS))
def test_an_item_on_hold_takes_no_step_for_its_media_and_takes_them_once_released(hold: str, media: str) -> None:
    w = World()
    if media != "to upload":
        w.pending_media(uploaded_s_ago=600.0 if media == "to poll" else 1.0)
    HOLDS[hold](w)
    item = w.item()
    assert w.run(item) == Executed("held", False)
    assert w.steps() == ([], [], {}), "no upload, no poll, no wait (which would overwrite the item's reason)"
    rec = w.repo.items[item.item_id]
    assert (rec.status, rec.held) == (S.PENDING, True), "marked held: the reconciler publishes it once released"
    w.repo.held_jobs.clear()
    w.repo.paused_guids.clear()
    released = w.run(item)
    uploads, polls, waits = w.steps()
    assert (len(uploads), len(polls), len(waits)) == {"to upload": (1, 0, 0), "to poll": (0, 1, 0),
                                                      "to wait for": (0, 0, 1)}[media]
    assert released.outcome == ("media_ready" if media != "to wait for" else "media_waiting")


def test_a_redelivered_command_of_an_item_no_longer_pending_takes_no_step() -> None:
    w = World()
    item = w.item()
    w.repo.claim(item.item_id, "another-sender")
    assert w.run(item) == Executed("not_pending", False)
    assert w.steps() == ([], [], {})


def test_an_item_whose_media_is_ready_is_not_asked_about_holds_before_its_claim(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The claim (begin_send) checks holds itself: the common case costs no statement more.
    w = World()
    first = w.item()
    assert w.run(first).outcome == "media_ready"
    asked: list[str] = []
    real = w.actions.hold

    async def hold(c: ItemCommand) -> Begun | None:  # the store's own, counted
        asked.append(c.item_id)
        return await real(c)

    monkeypatch.setattr(w.actions, "hold", hold)
    assert w.run(first).outcome == "confirmed" and w.run(w.item()).outcome == "confirmed"
    assert asked == []


# -- the send after an upload or poll is the guid's next call -------------------------------

def test_an_upload_answered_ready_takes_the_turn_and_the_item_is_sent_at_the_next() -> None:
    w = World()
    item = w.item()
    turn = w.run(item)
    assert (turn.outcome, turn.called_gateway, turn.stepped, turn.claimed) == ("media_ready", False, True, False)
    assert turn.answered_mono is not None, "the guid's next call is spaced from the upload's answer"
    assert w.gw.sent == [] and w.repo.calls == [], "neither claimed nor sent in the upload's turn"
    assert w.repo.items[item.item_id].status is S.PENDING and w.actions.waits == {}
    assert w.run(item).outcome == "confirmed"
    assert [s.media_id for s in w.gw.sent] == ["media-1"] and len(w.gw.upload_keys) == 1


def test_a_status_poll_answered_ready_takes_the_turn_too() -> None:
    w = World()
    w.pending_media(uploaded_s_ago=600.0)
    item = w.item()
    turn = w.run(item)
    assert (turn.outcome, turn.stepped) == ("media_ready", True) and w.gw.polls == ["media-0"]
    assert w.gw.sent == []
    assert w.run(item).outcome == "confirmed" and w.gw.polls == ["media-0"]


class TimedActions(FakeActionGateway):
    """Notes, by the running loop's clock, when each upload was answered and each send made."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[float] = []
        self.sends: list[float] = []

    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None,
                           idem_key: str, tenant: str = "default") -> MediaAnswer:
        answer = await super().upload_media(guid, url, kind, file_name, idem_key, tenant)
        self.answered.append(now())
        return answer

    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt:
        self.sends.append(now())
        return await super().send_media(kind, guid, to_id, media_id, idem_key, deadline, tenant)


class MediaExecutor(Recorder):
    """The real executor behind a dispatcher: an item leaves the guid's queue once done."""

    def __init__(self, executor: Executor) -> None:
        super().__init__()
        self.executor = executor

    async def execute(self, c: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        result = await self.executor.execute(c, before_call, spare_s)
        if result.outcome != "media_ready":
            self.store.pending.pop(c.item_id, None)
        return result


def guid_with_media_items(n: int, limits: Limits, monkeypatch: pytest.MonkeyPatch) -> TimedActions:
    """``n`` image items of one guid through its worker, on virtual time, until all are sent."""
    monkeypatch.setattr(core, "time", SimpleNamespace(monotonic=now))  # the executor's answers, on the loop's clock
    gw = TimedActions()

    async def scenario() -> None:
        repo = InMemoryItemRepository()
        ex = MediaExecutor(Executor(repo, FakeGateway(), owner="me", retry=POLICY, rng=random.Random(0),
                                    actions=InMemoryActions(repo, {"j": IMAGE}), action_gateway=gw))
        d, _, _ = dispatcher(limits, executor=ex)
        for k in range(n):
            c = cmd("g", k, job="j")
            repo.add(c.item_id)
            ring(d, ex.store, c)
        await until(lambda: len(gw.sends) == n, timeout=600)
        stop(d)

    run_virtual(scenario())
    return gw


def gaps(times: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_the_send_after_an_upload_comes_one_gap_after_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = Limits(min_interval_s=5.0, jitter_s=0.0, online_reserve=0.0)
    gw = guid_with_media_items(3, limits, monkeypatch)
    assert len(gw.answered) == 1, "one upload serves the guid's items"
    assert gw.sends[0] - gw.answered[0] >= limits.min_interval_s, (
        f"the first send followed the upload's answer after {gw.sends[0] - gw.answered[0]:.3f} s")
    assert min(gaps(gw.sends)) >= limits.min_interval_s
