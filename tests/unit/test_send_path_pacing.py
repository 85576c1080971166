"""What a send's answer means for its guid's pace: only a rate limit the gateway answered slows
the guid; Pacer's own deferrals take no slot; a media upload or status poll takes a slot but
is no send; a call is paced whatever fails after its answer; the windows count claims, as the
database does.

A check that something takes *no* pacing slot runs at a 30 s interval (``SLOW``): a slot taken
wrongly makes the run miss its deadline, however loaded the machine; a check that something
does take one measures a gap of at least the interval."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import MediaMessage, SyncMessage
from pacer_common.domain.status import ItemStatus
from pacer_sender import execution
from pacer_sender.core import AfterCall, Executed, Executor
from pacer_sender.domain.media import MediaRow
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.ports import UnstorableItem
from tests.unit.action_fakes import ScriptedActionGateway, ScriptedActions
from tests.unit.dispatching import BeforeCall, Recorder, cmd, dispatcher, ring, stop, until
from tests.unit.fakes import FakeGateway, GrantAll, InMemoryItemRepository

F = FailureClass
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=30))
BREAKER_OPEN = SendError(F.RATE_LIMITED, None, "tenant 't': its gateway is failing (circuit open); next try in 5s",
                         retry_after=timedelta(seconds=5), deferred=True)
GATEWAY_LIMIT = SendError(F.RATE_LIMITED, 45009, "too fast")


def command(item_id: str = "it-1") -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id="job-1", shard_id=1, guid="g-1", to_id="c-1", content="hi",
                       idem_key=f"k-{item_id}", priority=3, kind="campaign")


def execute(repo: InMemoryItemRepository, gateway: FakeGateway, actions: ScriptedActions | None = None,
            action_gateway: ScriptedActionGateway | None = None) -> Executed:
    ex = Executor(repo, gateway, owner="s-1", retry=POLICY, rng=random.Random(0), actions=actions,
                  action_gateway=action_gateway)
    return asyncio.run(ex.execute(command()))


def one_item(*errors: SendError) -> tuple[InMemoryItemRepository, FakeGateway]:
    repo = InMemoryItemRepository()
    repo.add("it-1")
    return repo, FakeGateway(list(errors))


# -- what the executor says of each answer -----------------------------------------------------

def test_pacers_own_deferral_is_no_call_of_the_gateway_and_uses_no_attempt() -> None:
    repo, gw = one_item(BREAKER_OPEN)
    result = execute(repo, gw)
    assert (result.outcome, result.called_gateway, result.claimed) == ("deferred", False, True)
    rec = repo.items["it-1"]
    assert (rec.status, rec.error_class, rec.attempts) == (ItemStatus.WAITING_RETRY, "rate_limited", 0)


class Deferring:
    """Pacer's own deferral of sends (``counted``) or of every call, as asked before a claim."""

    def __init__(self, error: SendError | None, sends_only: bool = False) -> None:
        self.error, self.sends_only = error, sends_only
        self.asked: list[tuple[str, bool]] = []

    def deferral(self, tenant: str, counted: bool = True) -> SendError | None:
        self.asked.append((tenant, counted))
        return None if self.sends_only and not counted else self.error


def test_a_deferral_known_before_the_claim_claims_nothing_and_calls_nothing() -> None:
    # The tenant's breaker is open: the item is not claimed (a claim counts in the guid's
    # send windows), nor sent, nor moved; it stays pending for the guid to try again.
    repo, gw = one_item()
    ex = Executor(repo, gw, owner="s-1", retry=POLICY, rng=random.Random(0), deferrals=Deferring(BREAKER_OPEN))
    result = asyncio.run(ex.execute(command()))
    assert (result.outcome, result.called_gateway, result.claimed) == ("deferred", False, False)
    assert result.error is BREAKER_OPEN and gw.sent == []
    rec = repo.items["it-1"]
    assert (rec.status, rec.attempts) == (ItemStatus.PENDING, 0)
    cleared = Executor(repo, gw, owner="s-1", retry=POLICY, rng=random.Random(0), deferrals=Deferring(None))
    assert asyncio.run(cleared.execute(command())).outcome == "confirmed"


def test_a_customer_read_is_not_deferred_by_the_tenants_quota() -> None:
    quota = SendError(F.RATE_LIMITED, None, "tenant 't' has used its quota", retry_after=timedelta(seconds=60),
                      deferred=True)
    repo, gw = one_item()
    deferrals = Deferring(quota, sends_only=True)
    actions = ScriptedActions(SyncMessage(type="customer.sync"))
    ex = Executor(repo, gw, owner="s-1", retry=POLICY, rng=random.Random(0), actions=actions,
                  action_gateway=ScriptedActionGateway(), deferrals=deferrals)
    assert asyncio.run(ex.execute(command())).outcome == "confirmed"
    assert deferrals.asked == [("default", False)]


def test_a_rate_limit_the_gateway_answered_is_a_call() -> None:
    repo, gw = one_item(GATEWAY_LIMIT)
    result = execute(repo, gw)
    assert (result.outcome, result.called_gateway) == ("rate_limited", True)
    assert result.error is not None and result.error.gateway_rate_limit


def test_a_customer_read_whose_save_meets_the_database_away_is_read_again_not_left_to_a_lookup() -> None:
    repo, gw = one_item()
    actions, actions_gw = ScriptedActions(SyncMessage(type="customer.sync")), ScriptedActionGateway()
    actions.save_error = TransientError("database away")
    result = execute(repo, gw, actions, actions_gw)
    assert actions_gw.calls == ["customer_detail"]
    rec = repo.items["it-1"]
    assert (result.outcome, rec.status, rec.error_class) == ("retry", ItemStatus.WAITING_RETRY, "retryable")
    assert "it-1" not in [e.item_id for e in repo.ledger.values()], "the key is freed: nothing to verify"


class RefusingConfirm(InMemoryItemRepository):
    """Its confirmation is refused, as Postgres refuses a value it cannot store."""

    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt, spare_s: float = 0.0) -> bool:
        raise UnstorableItem("unsupported Unicode escape sequence")


def test_an_error_after_the_gateway_answered_carries_the_call_for_the_guids_pacing() -> None:
    repo = RefusingConfirm()
    repo.add("it-1")
    before = time.monotonic()
    with pytest.raises(AfterCall) as exc:
        execute(repo, FakeGateway())
    called = exc.value.called
    assert called.called_gateway and called.answered_mono is not None and called.answered_mono >= before
    assert isinstance(exc.value.cause, UnstorableItem)


def pending_media(uploaded_s_ago: float = 600.0) -> MediaRow:
    return MediaRow("m-1", "pending", None, datetime.now(UTC) - timedelta(seconds=uploaded_s_ago), None)


def test_a_media_status_poll_is_a_step_not_a_send_and_a_rate_limited_one_carries_the_limit() -> None:
    msg = MediaMessage(type="image", url="https://cdn.example/a.png")
    repo, gw = one_item()
    before = time.monotonic()
    answered = execute(repo, gw, ScriptedActions(msg, pending_media()), poll := ScriptedActionGateway())
    assert poll.calls == ["status"]
    assert (answered.outcome, answered.called_gateway, answered.error) == ("media_waiting", False, None)
    assert answered.stepped and answered.answered_mono is not None and answered.answered_mono >= before
    limited = execute(repo, gw, ScriptedActions(msg, pending_media()), ScriptedActionGateway([GATEWAY_LIMIT]))
    assert (limited.outcome, limited.called_gateway, limited.stepped) == ("media_waiting", False, True)
    assert limited.error is GATEWAY_LIMIT
    upload = execute(repo, gw, ScriptedActions(msg), ScriptedActionGateway([GATEWAY_LIMIT]))
    assert (upload.outcome, upload.called_gateway, upload.error) == ("media_waiting", False, GATEWAY_LIMIT)
    assert upload.stepped
    assert repo.calls == [], "no media step claims the item"


def test_an_upload_pacer_deferred_is_no_step() -> None:
    msg = MediaMessage(type="image", url="https://cdn.example/a.png")
    repo, gw = one_item()
    deferred = execute(repo, gw, ScriptedActions(msg), ScriptedActionGateway([BREAKER_OPEN]))
    assert (deferred.outcome, deferred.stepped) == ("media_waiting", False), "no request was made"
    waiting = execute(repo, gw, ScriptedActions(msg, pending_media(uploaded_s_ago=1.0)), ScriptedActionGateway())
    assert (waiting.outcome, waiting.stepped) == ("media_waiting", False), "a look at the record calls nothing"


# -- how the guid is paced by each ----------------------------------------------------------------

class Scripted(Recorder):
    """Each execution answers with the next of ``script`` (an ``Executed``, or an exception to
    raise), answered at once (``answered_mono`` now)."""

    def __init__(self, script: list[Executed | Exception]) -> None:
        super().__init__()
        self.script = script
        self.calls: list[float] = []

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        self.store.pending.pop(cmd.item_id, None)
        if before_call is not None:
            await before_call()
        now = time.monotonic()
        self.calls.append(now)
        step = self.script.pop(0) if self.script else Executed("confirmed", True, answered_mono=now)
        if isinstance(step, Exception):
            raise step
        return step


LIMITS = Limits(min_interval_s=0.3, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=4.0, penalty_decay=0.5)
# So slow that a pacing slot taken wrongly makes ``run_guid`` miss its deadline (10 s).
SLOW = Limits(min_interval_s=30.0, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=4.0, penalty_decay=0.5)


def run_guid(script: list[Executed | Exception], items: int, pacer: GuidPacer | None = None,
             calls: int | None = None, limits: Limits = LIMITS) -> tuple[GuidPacer, Scripted, GrantAll]:
    """``items`` rung for guid g, run until ``calls`` executions (one per item by default)."""
    calls = items if calls is None else calls

    async def scenario() -> tuple[GuidPacer, Scripted, GrantAll]:
        ex, store = Scripted(script), GrantAll()
        d, _, _ = dispatcher(limits, store=store, executor=ex)
        if pacer is not None:
            d.paces["g"] = pacer
        for n in range(items):
            ring(d, ex.store, cmd("g", n))
        await until(lambda: len(ex.calls) == calls and ((g := d.guids.get("g")) is None or g.executing is None))
        stop(d)
        return d.paces["g"], ex, store

    return asyncio.run(scenario())


def test_pacers_own_deferral_neither_slows_the_guid_nor_takes_a_pacing_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # At a 30 s interval the three calls fit in run_guid's deadline only if neither deferral
    # took a slot; the send after them does. The windows count on one wall-clock reading: a
    # minute or an hour that ended between the claims would start again at one.
    wall = time.time()
    monkeypatch.setattr(execution, "time", SimpleNamespace(time=lambda: wall))
    deferred = Executed("deferred", False, BREAKER_OPEN, claimed_at=datetime.now(UTC))
    pacer, ex, store = run_guid([deferred, deferred], 3, limits=SLOW)
    assert pacer.multiplier == 1.0 and store.penalized == {}, "a deferral slowed the guid as a rate limit does"
    assert pacer.last_any == ex.calls[2], "only the send took a slot"
    assert pacer.windows["minute"].total == 3, "each claim counts in the windows, as the database counts it"


def test_a_rate_limit_the_gateway_answered_slows_the_guid() -> None:
    limited = Executed("rate_limited", True, GATEWAY_LIMIT, claimed_at=datetime.now(UTC),
                       answered_mono=time.monotonic())
    pacer, _, store = run_guid([limited], 1)
    assert pacer.multiplier == 4.0 and store.penalized == {"g": (1, 4.0, None)}
    assert pacer.windows["minute"].total == 1, "its claim counts, as the database counts it"


def test_a_rate_limit_asking_for_quiet_gives_the_lease_row_the_quiet_with_the_penalty() -> None:
    """``Retry-After: 60``: the row is told the quiet with the penalty, at once, so a sender
    taking the guid over keeps it (the row is handed what is left of it, not its end by this
    sender's clock)."""
    quiet = SendError(F.RATE_LIMITED, 45009, "too fast", retry_after=timedelta(seconds=60))
    answered = time.monotonic()
    pacer, _, store = run_guid([Executed("rate_limited", True, quiet, claimed_at=datetime.now(UTC),
                                         answered_mono=answered)], 1)
    assert pacer.quiet_until == pytest.approx(answered + 60.0)
    (epoch, penalty, quiet_s), = store.penalized.values()
    assert (epoch, penalty) == (1, 4.0)
    assert quiet_s is not None and 55.0 < quiet_s <= 60.0, quiet_s


def test_a_media_upload_or_poll_takes_a_slot_but_no_window_and_no_decay() -> None:
    # A campaign with an image per target: each upload spaces the guid's next call, so the
    # gateway never sees uploads (or polls) back to back; but they claimed nothing and are no
    # clean sends.
    step = Executed("media_waiting", False, stepped=True)  # answered now (answered_mono: None)
    pacer, ex, _ = run_guid([step, step], 3, GuidPacer(multiplier=4.0))
    gaps = [b - a for a, b in zip(ex.calls, ex.calls[1:], strict=False)]
    assert min(gaps) >= 4.0 * LIMITS.min_interval_s, f"a media step took no pacing slot: {gaps}"
    assert pacer.windows["minute"].total == 1, "only the send counts in the windows, as in the database"
    assert pacer.multiplier == 2.0, "only the one clean send wears the penalty down"


def test_a_media_item_that_only_looked_at_its_record_takes_no_slot() -> None:
    # Waiting for a media someone else uploaded (a read of the media row): no call, no slot.
    # At 30 s an interval, the three calls fit in run_guid's deadline only so.
    pacer, ex, _ = run_guid([Executed("media_waiting", False), Executed("media_waiting", False)], 3, limits=SLOW)
    assert pacer.last_any == ex.calls[2], "only the send took a slot"
    assert pacer.windows["minute"].total == 1


def test_a_rate_limited_media_upload_slows_the_guid() -> None:
    pacer, _, store = run_guid([Executed("media_waiting", False, GATEWAY_LIMIT)], 1)
    assert pacer.multiplier == 4.0 and store.penalized == {"g": (1, 4.0, None)}
    assert "minute" not in pacer.windows or pacer.windows["minute"].total == 0


def test_a_call_whose_outcome_could_not_be_recorded_still_spaces_the_guids_next_send() -> None:
    answered = Executed("fenced", True, None, datetime.now(UTC), answered_mono=time.monotonic())
    failed = AfterCall(answered, UnstorableItem("unsupported Unicode escape sequence"))
    _, ex, _ = run_guid([failed], 2)
    assert answered.answered_mono is not None
    gap = ex.calls[1] - answered.answered_mono
    assert gap >= LIMITS.min_interval_s, f"the next send followed {gap:.3f} s after a send the gateway answered"


def test_a_guid_deferred_before_its_claim_waits_with_its_item_and_counts_no_claim() -> None:
    wait = 0.2
    early = SendError(F.RATE_LIMITED, None, "circuit open", retry_after=timedelta(seconds=wait), deferred=True)
    pacer, ex, store = run_guid([Executed("deferred", False, early)], 1, calls=2)
    assert len(ex.calls) == 2, "the item was tried again once the deferral's time was up"
    assert ex.calls[1] - ex.calls[0] >= wait * 0.9, "the guid did not wait out the deferral"
    assert pacer.windows["minute"].total == 1, "only the send counts in the windows, not the deferral"
    assert pacer.multiplier == 1.0 and store.penalized == {}
