"""Executing one item against in-memory ports: at most one gateway call, always guarded."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus
from pacer_common.gateway import SendDeadlinePassed
from pacer_sender import core
from pacer_sender.core import BeforeCall, Executed, Executor
from pacer_sender.domain.decisions import Decision

from .fakes import FakeGateway, InMemoryItemRepository, SentText

S = ItemStatus
F = FailureClass
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))


def command(item_id: str = "it-1", idem_key: str = "push:r-1:g-1:room-1:v1", *,
            expire_at: datetime | None = None) -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id="job-1", shard_id=1, guid="g-1", to_id="room-1",
                       content="Hello A", idem_key=idem_key, priority=3, kind="campaign",
                       expire_at=expire_at)


def executor(repo: InMemoryItemRepository, gateway: FakeGateway) -> Executor:
    return Executor(repo, gateway, owner="sender-1", retry=POLICY, rng=random.Random(0))


def run(repo: InMemoryItemRepository, gateway: FakeGateway, cmd: ItemCommand) -> Executed:
    return asyncio.run(executor(repo, gateway).execute(cmd))


def setup(*item_ids: str, errors: list[SendError] | None = None) -> tuple[InMemoryItemRepository, FakeGateway]:
    repo = InMemoryItemRepository()
    for item_id in item_ids or ("it-1",):
        repo.add(item_id)
    return repo, FakeGateway(errors)


# -- the happy path and redelivery ---------------------------------------------------------

def test_the_confirmation_is_told_how_long_it_may_take() -> None:
    repo, gw = setup()
    assert asyncio.run(executor(repo, gw).execute(command(), None, 2.5)).outcome == "confirmed"
    assert repo.spares == [2.5]


def test_happy_path_calls_the_gateway_once_and_confirms() -> None:
    repo, gw = setup()
    cmd = command()
    assert run(repo, gw, cmd) == Executed("confirmed", True)
    assert gw.sent == [SentText("g-1", "room-1", "Hello A", cmd.idem_key)]
    rec = repo.items["it-1"]
    assert rec.status is S.CONFIRMED
    assert rec.history == [S.PENDING, S.CLAIMED, S.SUBMITTED, S.CONFIRMED]
    assert rec.attempts == 1
    assert rec.receipt is not None and rec.receipt.msg_id == "msg-1"
    assert repo.ledger[cmd.idem_key].item_id == "it-1"
    assert repo.ledger[cmd.idem_key].state == "sent"


def test_submitted_is_written_before_the_gateway_is_called() -> None:
    repo, _ = setup()
    seen: list[ItemStatus] = []
    gw = FakeGateway(during_send=lambda call: seen.append(repo.items["it-1"].status))
    run(repo, gw, command())
    assert seen == [S.SUBMITTED]
    assert repo.ledger["push:r-1:g-1:room-1:v1"].state in {"reserved", "sent"}


def test_redelivered_command_for_a_finished_item_never_calls_the_gateway() -> None:
    repo, gw = setup()
    cmd = command()
    run(repo, gw, cmd)
    assert run(repo, gw, cmd) == Executed("not_pending", False)
    assert len(gw.sent) == 1
    assert repo.items["it-1"].status is S.CONFIRMED


def test_command_for_an_item_claimed_elsewhere_never_calls_the_gateway() -> None:
    repo, gw = setup()
    repo.claim("it-1", "sender-2")
    assert run(repo, gw, command()) == Executed("not_pending", False)
    assert gw.sent == []
    assert repo.items["it-1"].owner == "sender-2"


# -- the idempotency ledger ----------------------------------------------------------------

def test_second_item_with_the_same_key_is_intercepted_without_a_gateway_call() -> None:
    repo, gw = setup("it-1", "it-2")
    key = "ticket:T-9:v4:g-1:room-1"
    assert run(repo, gw, command("it-1", key)).outcome == "confirmed"
    assert run(repo, gw, command("it-2", key)) == Executed("duplicate", False)
    assert len(gw.sent) == 1
    assert repo.items["it-2"].status is S.ABANDONED
    assert repo.ledger[key].item_id == "it-1"


def test_key_held_by_an_in_doubt_item_still_intercepts_a_second_item() -> None:
    repo, gw = setup("it-1", "it-2", errors=[SendError(F.IN_DOUBT, None, "timeout")])
    key = "reply:g-1:m-1:room-1"
    assert run(repo, gw, command("it-1", key)).outcome == "in_doubt"
    assert run(repo, gw, command("it-2", key)) == Executed("duplicate", False)
    assert len(gw.sent) == 1


def test_items_with_different_keys_are_both_sent() -> None:
    repo, gw = setup("it-1", "it-2")
    assert run(repo, gw, command("it-1", "k-1")).outcome == "confirmed"
    assert run(repo, gw, command("it-2", "k-2")).outcome == "confirmed"
    assert [c.idem_key for c in gw.sent] == ["k-1", "k-2"]


# -- fencing ---------------------------------------------------------------------------------

def test_outcome_after_losing_the_lease_mid_call_is_not_recorded() -> None:
    repo, _ = setup()
    gw = FakeGateway(during_send=lambda call: repo.submit_lease_expired("it-1"))
    assert run(repo, gw, command()) == Executed("fenced", True)
    assert repo.items["it-1"].status is S.RECOVERY_PENDING  # left for verification, not confirmed
    assert "confirm" in repo.calls


def test_failure_after_losing_the_lease_mid_call_is_not_recorded() -> None:
    repo = InMemoryItemRepository()
    repo.add("it-1")
    gw = FakeGateway([SendError(F.RETRYABLE, -1, "busy")],
                     during_send=lambda call: repo.submit_lease_expired("it-1"))
    assert run(repo, gw, command()) == Executed("fenced", True)
    assert repo.items["it-1"].status is S.RECOVERY_PENDING
    assert repo.ledger["push:r-1:g-1:room-1:v1"].item_id == "it-1"  # not released


# -- failures --------------------------------------------------------------------------------

def test_in_doubt_goes_to_recovery_and_keeps_the_key_reserved() -> None:
    repo, gw = setup(errors=[SendError(F.IN_DOUBT, None, "read timeout")])
    cmd = command()
    assert run(repo, gw, cmd) == Executed("in_doubt", True)
    assert repo.items["it-1"].status is S.RECOVERY_PENDING
    assert repo.ledger[cmd.idem_key].item_id == "it-1"
    assert repo.ledger[cmd.idem_key].state == "reserved"
    # and a redelivered command does not send it again
    assert run(repo, gw, cmd) == Executed("not_pending", False)
    assert len(gw.sent) == 1


def test_retryable_failure_schedules_a_retry_and_frees_the_key() -> None:
    repo, gw = setup(errors=[SendError(F.RETRYABLE, -1, "busy")])
    before = datetime.now(UTC)
    cmd = command()
    assert run(repo, gw, cmd) == Executed("retry", True)
    rec = repo.items["it-1"]
    assert rec.status is S.WAITING_RETRY
    assert rec.next_attempt_at is not None and rec.next_attempt_at > before
    assert cmd.idem_key not in repo.ledger


def test_not_sent_failure_is_retried() -> None:
    repo, gw = setup(errors=[SendError(F.NOT_SENT, None, "connection refused")])
    assert run(repo, gw, command()) == Executed("retry", True)
    assert repo.items["it-1"].status is S.WAITING_RETRY


def test_rate_limited_failure_is_reported_as_such_and_retried() -> None:
    repo, gw = setup(errors=[SendError(F.RATE_LIMITED, 45009, "too fast", retry_after=timedelta(seconds=60))])
    before = datetime.now(UTC)
    assert run(repo, gw, command()) == Executed("rate_limited", True)
    rec = repo.items["it-1"]
    assert rec.status is S.WAITING_RETRY
    assert rec.next_attempt_at is not None and rec.next_attempt_at >= before + timedelta(seconds=60)


def test_a_rate_limit_s_quiet_is_written_with_its_outcome_and_no_other_failure_writes_one() -> None:
    """``Retry-After: 30`` on a rate limit: the settle carries when the quiet ends (the
    repository writes what is left of it to the guid's lease row in the same transaction); a
    retryable failure, a rate limit without Retry-After, and Pacer's own deferral (a tenant's
    quota, say: no gateway quiet) carry none."""
    repo, gw = setup(errors=[SendError(F.RATE_LIMITED, 45009, "too fast", retry_after=timedelta(seconds=30))])
    run(repo, gw, command())
    ((guid, left),) = repo.settled_quiets
    assert guid == "g-1" and 29 < left < 30, "counted from the gateway's answer"
    for error in (SendError(F.RETRYABLE, -1, "busy"), SendError(F.RATE_LIMITED, 45009, "too fast"),
                  SendError(F.RATE_LIMITED, None, "tenant quota used up", retry_after=timedelta(seconds=300),
                            deferred=True)):
        repo, gw = setup(errors=[error])
        run(repo, gw, command())
        assert repo.settled_quiets == []


def test_rate_limited_answers_never_use_up_the_items_attempts() -> None:
    """Ten "too fast" answers in a row, with a retry policy of three attempts: the item is
    still waiting (reason rate_limited) with no attempt used, and sends once the gateway
    lets it."""
    repo, gw = setup(errors=[SendError(F.RATE_LIMITED, 45009, "too fast")] * 10)
    for _ in range(10):
        assert run(repo, gw, command()) == Executed("rate_limited", True)
        rec = repo.items["it-1"]
        assert (rec.status, rec.error_class, rec.attempts) == (S.WAITING_RETRY, "rate_limited", 0)
        assert command().idem_key not in repo.ledger, "not sent: the key is free"
        repo.requeue("it-1")
    assert run(repo, gw, command()) == Executed("confirmed", True)
    assert repo.items["it-1"].attempts == 1


def test_needs_human_pauses_the_guid_and_later_items_are_held_unsent() -> None:
    repo, gw = setup(errors=[SendError(F.NEEDS_HUMAN, 1001, "device offline")])
    assert run(repo, gw, command()) == Executed("needs_human", True)
    assert repo.items["it-1"].status is S.WAITING_RETRY  # kept for after the guid is back
    assert repo.items["it-1"].error_class == "needs_human"
    assert "device offline" in repo.paused_guids["g-1"]
    repo.add("it-2")
    sent_before = len(gw.sent)
    assert run(repo, gw, command("it-2", idem_key="push:r-1:g-1:room-2:v1")) == Executed("held", False)
    assert repo.items["it-2"].status is S.PENDING and repo.items["it-2"].held
    assert len(gw.sent) == sent_before


@pytest.mark.parametrize(("error", "level"), [
    (SendError(F.NEEDS_HUMAN, 1003, "account unauthorized"), logging.WARNING),  # a person must act
    (SendError(F.BAD_PARAMS, 40001, "no such chat"), logging.WARNING),  # failed for good
    (SendError(F.RETRYABLE, -1, "busy"), logging.INFO),  # Pacer retries it
    (SendError(F.RATE_LIMITED, 45009, "too fast"), logging.INFO),  # Pacer slows the guid down
])
def test_a_failed_send_is_a_warning_only_when_someone_must_look(error: SendError, level: int,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    repo, gw = setup(errors=[error])
    with caplog.at_level(logging.INFO, logger=core.log.name):
        run(repo, gw, command())
    (line,) = [r for r in caplog.records if r.getMessage().startswith("send failed")]
    assert line.levelno == level and error.message in line.getMessage()


def test_retries_are_bounded_by_the_policy() -> None:
    repo, gw = setup(errors=[SendError(F.RETRYABLE, -1, "busy")] * 10)
    cmd = command()
    outcomes = []
    for _ in range(10):
        result = run(repo, gw, cmd)
        outcomes.append(result.outcome)
        if repo.items["it-1"].status is S.WAITING_RETRY:
            repo.requeue("it-1")
    assert outcomes[:3] == ["retry", "retry", "failed"]
    assert set(outcomes[3:]) == {"not_pending"}
    assert len(gw.sent) == POLICY.max_attempts
    assert repo.items["it-1"].attempts == POLICY.max_attempts
    assert repo.items["it-1"].status is S.FAILED


def test_retry_after_a_retryable_failure_reuses_the_same_key_and_can_confirm() -> None:
    repo, gw = setup(errors=[SendError(F.RETRYABLE, -1, "busy")])
    cmd = command()
    assert run(repo, gw, cmd).outcome == "retry"
    repo.requeue("it-1")
    assert run(repo, gw, cmd) == Executed("confirmed", True)
    assert [c.idem_key for c in gw.sent] == [cmd.idem_key, cmd.idem_key]
    assert repo.ledger[cmd.idem_key].state == "sent"


# -- expiry ----------------------------------------------------------------------------------

def test_expired_command_is_expired_without_a_claim_or_gateway_call() -> None:
    repo, gw = setup()
    cmd = command(expire_at=datetime.now(UTC) - timedelta(seconds=1))
    assert run(repo, gw, cmd) == Executed("expired", False)
    assert gw.sent == []
    assert repo.items["it-1"].status is S.EXPIRED
    assert repo.calls == ["expire"]


def test_a_command_about_to_expire_is_expired_rather_than_sent_late() -> None:
    repo, gw = setup()
    cmd = command(expire_at=datetime.now(UTC) + timedelta(seconds=0.5))
    assert run(repo, gw, cmd) == Executed("expired", False)
    assert gw.sent == [] and repo.calls == ["expire"]
    repo, gw = setup()
    assert run(repo, gw, command(expire_at=datetime.now(UTC) + timedelta(seconds=5))).outcome == "confirmed"


def test_expired_command_does_not_touch_an_item_that_already_finished() -> None:
    repo, gw = setup()
    run(repo, gw, command())
    late = command(expire_at=datetime.now(UTC) - timedelta(seconds=1))
    assert run(repo, gw, late) == Executed("expired", False)
    assert repo.items["it-1"].status is S.CONFIRMED
    assert len(gw.sent) == 1


def test_command_with_future_expiry_is_sent() -> None:
    repo, gw = setup()
    cmd = command(expire_at=datetime.now(UTC) + timedelta(hours=1))
    assert run(repo, gw, cmd) == Executed("confirmed", True)


class SlowBegin(InMemoryItemRepository):
    """A claim that comes back late: ``queued_s`` waiting for a batched statement, then a
    statement of ``statement_s``."""

    def __init__(self, queued_s: float, statement_s: float) -> None:
        super().__init__()
        self.queued_s, self.statement_s = queued_s, statement_s

    async def begin_send(self, cmd: ItemCommand, owner: str):
        import dataclasses

        await asyncio.sleep(self.queued_s)
        sent_at = time.monotonic()
        await asyncio.sleep(self.statement_s)
        return dataclasses.replace(await super().begin_send(cmd, owner), sent_at=sent_at)


def late(queued_s: float, statement_s: float) -> tuple[Executed, SlowBegin, FakeGateway]:
    repo, gw = SlowBegin(queued_s, statement_s), FakeGateway()
    repo.add("it-1")
    ex = Executor(repo, gw, owner="sender-1", retry=POLICY, rng=random.Random(0), send_deadline_s=0.05)
    return asyncio.run(ex.execute(command())), repo, gw


def test_a_claim_older_than_the_send_deadline_is_not_sent() -> None:
    result, repo, gw = late(queued_s=0.0, statement_s=0.12)
    assert result == Executed("deadline_missed", False)
    assert gw.sent == [] and repo.items["it-1"].status is S.WAITING_RETRY
    assert "it-1" not in {e.item_id for e in repo.ledger.values()}  # nothing sent: key freed


def test_time_queued_before_the_claiming_statement_does_not_count_against_the_deadline() -> None:
    result, _repo, gw = late(queued_s=0.12, statement_s=0.0)
    assert result == Executed("confirmed", True)
    assert len(gw.sent) == 1


def test_a_wait_before_the_call_comes_after_the_claim_and_before_the_gateway() -> None:
    repo, _ = setup()
    seen: list[tuple[str, ItemStatus]] = []
    gw = FakeGateway(during_send=lambda call: seen.append(("call", repo.items["it-1"].status)))

    async def before_call(quiet_s: float | None = None) -> bool:
        seen.append(("before", repo.items["it-1"].status))
        return True

    result = asyncio.run(executor(repo, gw).execute(command(), before_call))
    assert seen == [("before", S.SUBMITTED), ("call", S.SUBMITTED)]
    assert result == Executed("confirmed", True)
    assert result.claim_s is not None and result.claim_s >= 0


def test_the_wait_before_the_call_is_told_what_is_left_of_a_quiet_the_claim_found_on_the_guid() -> None:
    """Another caller's quiet on the guid's lease row reaches the wait with the claim; the
    wait gives the item's turn up to it: settled unsent, its key freed."""
    repo, gw = setup()
    repo.quiets["g-1"] = 2.5
    told: list[float | None] = []

    async def before_call(quiet_s: float | None = None) -> bool:
        told.append(quiet_s)
        return False

    result = asyncio.run(executor(repo, gw).execute(command(), before_call))
    assert told == [2.5]
    assert result.outcome == "yielded" and gw.sent == [] and repo.items["it-1"].status is S.WAITING_RETRY


def stalling_wait(monkeypatch: pytest.MonkeyPatch) -> BeforeCall:
    """A wait before the call that outlasts a 0.05 s send deadline: the executor's clock moves
    on 0.12 s each time it is awaited."""
    skew = [0.0]
    monkeypatch.setattr(core, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + skew[0]))

    async def stalled(quiet_s: float | None = None) -> bool:
        skew[0] += 0.12
        return True

    return stalled


def test_a_wait_before_the_call_that_outlasts_the_send_deadline_calls_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    repo, gw = setup()
    ex = Executor(repo, gw, owner="sender-1", retry=POLICY, rng=random.Random(0), send_deadline_s=0.05)
    stalled = stalling_wait(monkeypatch)

    assert asyncio.run(ex.execute(command(), stalled)) == Executed("deadline_missed", False)
    assert gw.sent == [] and repo.items["it-1"].status is S.WAITING_RETRY


def deadline_passed() -> SendError:
    """What the gateway client raises when the send's deadline passed before it had a
    connection to write on (``SendDeadlinePassed``): nothing written."""
    try:
        try:
            raise SendDeadlinePassed("send deadline passed 0.250s before writing")
        except SendDeadlinePassed as exc:
            raise SendError(F.NOT_SENT, None, str(exc), deferred=True) from exc
    except SendError as err:
        return err


@pytest.mark.parametrize("where", ["before the call", "in the gateway client"])
def test_sends_pacer_was_too_late_to_make_use_up_no_attempt_however_many_and_its_expiry_ends_them(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """More missed send deadlines than the item has attempts, each Pacer's own lateness (its
    check before the call, or the gateway client's before writing): each leaves the item
    waiting with its attempt given back and its key freed, never failed, and no gateway call
    (no pacing slot). Sent once on time, it is confirmed at its first attempt; an item whose
    deadline keeps passing ends at its expire_at."""
    misses = POLICY.max_attempts + 2
    repo = InMemoryItemRepository()
    repo.add("it-1")
    gw = FakeGateway([deadline_passed() for _ in range(misses)] if where == "in the gateway client" else [])
    ex = Executor(repo, gw, owner="sender-1", retry=POLICY, rng=random.Random(0), send_deadline_s=0.05)
    stalled = stalling_wait(monkeypatch)

    for _ in range(misses):
        result = asyncio.run(ex.execute(command(), stalled if where == "before the call" else None))
        assert (result.outcome, result.called_gateway, result.claimed) == ("deadline_missed", False, True)
        rec = repo.items["it-1"]
        assert (rec.status, rec.attempts, rec.error_class) == (S.WAITING_RETRY, 0, "not_sent")
        assert "it-1" not in {e.item_id for e in repo.ledger.values()}  # nothing sent: key freed
        repo.requeue("it-1")
    assert asyncio.run(ex.execute(command())) == Executed("confirmed", True)
    assert repo.items["it-1"].attempts == 1
    assert len(gw.sent) == (misses + 1 if where == "in the gateway client" else 1)
    repo.add("it-2")  # its deadline kept passing until its expire_at came
    gone = asyncio.run(ex.execute(command("it-2", "k-2", expire_at=datetime.now(UTC) - timedelta(seconds=1))))
    assert gone == Executed("expired", False) and repo.items["it-2"].status is S.EXPIRED


def test_an_item_that_gives_its_turn_up_before_the_call_is_not_sent_and_keeps_its_attempt() -> None:
    repo, gw = setup()

    async def online_came(quiet_s: float | None = None) -> bool:
        return False

    result = asyncio.run(executor(repo, gw).execute(command(), online_came))
    assert result == Executed("yielded", False)
    rec = repo.items["it-1"]
    assert gw.sent == [] and rec.status is S.WAITING_RETRY
    assert rec.attempts == 0, "no attempt: the claim's is given back"
    assert "it-1" not in {e.item_id for e in repo.ledger.values()}  # nothing sent: key freed


class _TimedWrites(InMemoryItemRepository):
    """Notes when the outcome of a send began to be written (confirm or settle)."""

    def __init__(self) -> None:
        super().__init__()
        self.written_at: list[float] = []

    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt, spare_s: float = 0.0) -> bool:
        self.written_at.append(time.monotonic())
        return await super().confirm(cmd, epoch, receipt, spare_s)

    async def settle(self, cmd: ItemCommand, epoch: int, decision: Decision,
                     quiet_until: float | None = None) -> bool:
        self.written_at.append(time.monotonic())
        return await super().settle(cmd, epoch, decision)


@pytest.mark.parametrize("errors", [[], [SendError(F.RETRYABLE, -1, "busy")]], ids=["confirmed", "failed"])
def test_the_result_says_when_the_gateway_answered_after_the_call_before_the_outcome_was_written(
        errors: list[SendError]) -> None:
    called: list[float] = []
    repo = _TimedWrites()
    repo.add("it-1")
    gw = FakeGateway(errors, during_send=lambda sent: called.append(time.monotonic()))
    result = asyncio.run(executor(repo, gw).execute(command()))
    assert result.answered_mono is not None and called and repo.written_at
    assert called[0] <= result.answered_mono, "the answer, not the call's start"
    assert result.answered_mono <= repo.written_at[-1], "before the outcome was written, not after"
    assert run(repo, gw, command()).answered_mono is None, "no call, no time: the guid's spacing is left as it was"
