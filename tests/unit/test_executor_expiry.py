"""An item is never sent after its expire_at: not when the claim finds it expired (the
database's answer ``expired``), nor when it expires between the claim and the gateway call."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import RetryPolicy
from pacer_common.domain.status import ItemStatus
from pacer_sender import core
from pacer_sender.core import Executed, Executor
from pacer_sender.ports import Begun

from .fakes import FakeGateway, InMemoryItemRepository

S = ItemStatus
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))


def command(expire_at: datetime | None) -> ItemCommand:
    return ItemCommand(item_id="it-1", job_id="job-1", shard_id=1, guid="g-1", to_id="room-1", content="Hello",
                       idem_key="push:r-1:g-1:room-1:v1", priority=3, kind="campaign", expire_at=expire_at)


class ExpiringAtClaim(InMemoryItemRepository):
    """The database's claim, which expires an item whose expire_at came meanwhile."""

    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun:
        self.calls.append("begin_send")
        self._move(cmd.item_id, S.EXPIRED)
        return Begun("expired", None, None, None)


class _Clock(datetime):
    skew = timedelta(0)

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # a datetime, as the real one
        return datetime.now(tz) + cls.skew


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> type[_Clock]:
    monkeypatch.setattr(core, "datetime", _Clock)
    monkeypatch.setattr(_Clock, "skew", timedelta(0))
    return _Clock


def test_an_item_the_claim_expires_is_not_sent() -> None:
    repo, gw = ExpiringAtClaim(), FakeGateway()
    repo.add("it-1")
    ex = Executor(repo, gw, owner="sender-1", retry=POLICY, rng=random.Random(0))

    result = asyncio.run(ex.execute(command(datetime.now(UTC) + timedelta(hours=1))))

    assert result == Executed("expired", False)
    assert gw.sent == [] and repo.calls == ["begin_send"], "nothing settled or sent after the claim's answer"


def _run_with_a_gap(repo: InMemoryItemRepository, gw: FakeGateway, cmd: ItemCommand,
                    during: Any) -> Executed:
    ex = Executor(repo, gw, owner="sender-1", retry=POLICY, rng=random.Random(0))

    async def gap(quiet_s: float | None = None) -> bool:
        during()
        return True

    return asyncio.run(ex.execute(cmd, gap))


def test_an_item_that_expires_between_the_claim_and_the_call_is_put_back_unsent(clock: type[_Clock]) -> None:
    repo, gw = InMemoryItemRepository(), FakeGateway()
    repo.add("it-1")
    cmd = command(datetime.now(UTC) + timedelta(seconds=30))

    def wait_outlasts_expiry() -> None:
        clock.skew = timedelta(seconds=29.5)  # within the margin of its expire_at at the call

    result = _run_with_a_gap(repo, gw, cmd, wait_outlasts_expiry)

    assert (result.outcome, result.called_gateway) == ("expiring", False)
    rec = repo.items["it-1"]
    assert gw.sent == [] and rec.status is S.WAITING_RETRY
    assert rec.history == [S.PENDING, S.CLAIMED, S.SUBMITTED, S.WAITING_RETRY]
    assert rec.attempts == 0 and rec.error_class == "not_sent", "no attempt: nothing was sent"
    assert cmd.idem_key not in repo.ledger, "the key is freed"


def test_an_item_expiring_at_the_call_whose_lease_was_taken_over_is_fenced(clock: type[_Clock]) -> None:
    repo, gw = InMemoryItemRepository(), FakeGateway()
    repo.add("it-1")

    def taken_over_and_late() -> None:
        repo.submit_lease_expired("it-1")
        clock.skew = timedelta(hours=2)

    result = _run_with_a_gap(repo, gw, command(datetime.now(UTC) + timedelta(hours=1)), taken_over_and_late)

    assert (result.outcome, result.called_gateway) == ("fenced", False)
    assert gw.sent == [] and repo.items["it-1"].status is S.RECOVERY_PENDING


def test_an_item_still_clear_of_its_expire_at_at_the_call_is_sent(clock: type[_Clock]) -> None:
    repo, gw = InMemoryItemRepository(), FakeGateway()
    repo.add("it-1")

    def short_wait() -> None:
        clock.skew = timedelta(seconds=10)  # 20 s still to go

    result = _run_with_a_gap(repo, gw, command(datetime.now(UTC) + timedelta(seconds=30)), short_wait)

    assert result.outcome == "confirmed" and len(gw.sent) == 1
