"""A guid's lifecycle: events apply in the order of their ``ts``, whatever order they arrive in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.guid_health import (
    DEFAULT_STATE_CODES,
    GuidHealth,
    GuidState,
    StatusEvent,
    apply,
    holds,
    state_for_code,
)

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
events = st.builds(StatusEvent, state=st.sampled_from(GuidState),
                   ts=st.integers(0, 50).map(lambda s: T0 + timedelta(seconds=s)),
                   source=st.sampled_from(["callback", "send_failure", "operator"]),
                   reason=st.none() | st.text(max_size=5))


def run(evs: list[StatusEvent]) -> GuidHealth | None:
    h: GuidHealth | None = None
    for e in evs:
        h, _ = apply(h, e)
    return h


def ev(state: GuidState, s: int) -> StatusEvent:
    return StatusEvent(state, T0 + timedelta(seconds=s), "callback")


def test_kicked_then_online_holds_then_resumes() -> None:
    h, changed = apply(None, ev(GuidState.ONLINE, 0))
    assert changed and not holds(h)
    h, changed = apply(h, ev(GuidState.KICKED, 5))
    assert changed and holds(h) and h.state is GuidState.KICKED and h.changes == 2
    h, changed = apply(h, ev(GuidState.ONLINE, 9))
    assert changed and not holds(h)


def test_an_older_event_never_overrides_a_newer_state() -> None:
    h = run([ev(GuidState.ONLINE, 10)])
    h2, changed = apply(h, ev(GuidState.KICKED, 3))
    assert (h2, changed) == (h, False)


def test_a_repeated_state_moves_the_newest_moment_so_an_event_in_between_stays_old() -> None:
    """kicked@1, kicked@8, then a late online@5: at 8 the guid was still kicked."""
    h = run([ev(GuidState.KICKED, 1), ev(GuidState.KICKED, 8), ev(GuidState.ONLINE, 5)])
    assert h is not None and h.state is GuidState.KICKED and h.event_ts == T0 + timedelta(seconds=8)
    assert h.changes == 1


def test_a_duplicate_is_harmless() -> None:
    h = run([ev(GuidState.OFFLINE, 4)])
    assert apply(h, ev(GuidState.OFFLINE, 4)) == (h, False)


@given(st.lists(events, min_size=1, max_size=12), st.randoms())
def test_any_arrival_order_ends_in_the_state_of_the_newest_event(evs: list[StatusEvent], rnd) -> None:
    """Generated events, delivered in any order and with repeats: the guid ends in the state of
    the event with the latest ts (the first to arrive among those tied at that ts)."""
    shuffled = evs + rnd.sample(evs, k=len(evs) // 2)
    rnd.shuffle(shuffled)
    h = run(shuffled)
    newest = max(e.ts for e in shuffled)
    first_newest = next(e for e in shuffled if e.ts == newest)
    assert h is not None and h.event_ts == newest and h.state is first_newest.state
    assert holds(h) == (first_newest.state is not GuidState.ONLINE)


def test_needs_human_codes_map_to_states() -> None:
    assert state_for_code(1002, DEFAULT_STATE_CODES) is GuidState.KICKED
    assert state_for_code(1003, DEFAULT_STATE_CODES) is GuidState.UNAUTHORIZED
    assert state_for_code(1001, DEFAULT_STATE_CODES) is GuidState.OFFLINE
    assert state_for_code(7777, DEFAULT_STATE_CODES) is GuidState.OFFLINE
    assert state_for_code(None, DEFAULT_STATE_CODES) is GuidState.OFFLINE
