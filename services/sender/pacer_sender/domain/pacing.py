"""Per-guid pacing: send like a careful human, within every limit the account has.

* A minimum interval plus a random gap (uniform or exponential), never a fixed rhythm.
* Two limiters in one account: online traffic (takeover prompts, auto-replies) may use the
  whole rate; batch traffic only the rate minus the online reserve — it never takes
  "what is free". Batch work more urgent than ``reserve_from_priority`` (ticket
  notifications) is spaced at the whole rate, after online work: it is sparse, and a
  customer waits on it; a campaign or a job's own rate does not hold it.
* Fixed windows per minute / hour (UTC's) and day (the guid's own, in its time zone),
  shared by both lanes, batch capped at its share.
* Quiet hours hold batch sends (not replies to a customer) until they end.
* A rate-limited rejection by the gateway multiplies the interval (up to ``max_penalty``);
  clean sends decay it back to 1. One that asks for quiet (``Retry-After``) also holds the
  whole guid, both lanes, that long from its answer. Pacer's own deferrals are no calls at all.
* A media upload or status poll is a call but no send (``stepped``): the guid's next call is
  spaced from it, but it counts in no window and wears no penalty down.
* The windows count the guid's claims, sent or not, as the database does.

All times are passed in: monotonic seconds for spacing, wall-clock seconds for windows and
quiet hours. A deferral here is never a failed attempt.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from pacer_common.domain.limits import SIZES, WINDOWS, Pacing
from pacer_common.domain.requests import Lane


class Limits(Pacing):
    """One account's limits (the fields: :class:`Pacing`), with the pacing arithmetic."""

    def jitter(self, rng: random.Random) -> float:
        if self.jitter_s <= 0:
            return 0.0
        if self.jitter_dist == "exponential":
            return min(rng.expovariate(1 / self.jitter_s), 4 * self.jitter_s)
        return rng.random() * self.jitter_s


@dataclass
class _Window:
    """The sends of the guid's current window of one size, until ``end`` (epoch seconds). A
    window is found (``Limits.window``) when a send falls past the last one's end, so a new
    time zone applies from the guid's next day; the last window's sends count in the new one
    when the two overlap (a new time zone), as in the database (never more sends than the
    limits allow)."""

    end: float = float("-inf")
    total: int = 0
    batch: int = 0


@dataclass
class GuidPacer:
    """When this guid last sent, per lane; readiness is computed from the *current* limits,
    so a hot change applies to a guid that is already waiting."""

    last_any: float | None = None
    last_batch: float | None = None
    jitter: float = 0.0  # the random part of the current gap, drawn once per send
    multiplier: float = 1.0
    windows: dict[str, _Window] = field(default_factory=dict)
    # A job's own rate (hot-set per job): batch sends wait this long after one of its sends.
    batch_hold_until: float | None = None
    # The last send known is a previous owner's (carried over a handover), none of ours since.
    handed_over: bool = False
    # The gateway asked for quiet on this guid (a rate limit's Retry-After) until then: no call
    # of either lane before it.
    quiet_until: float | None = None

    def ready_at(self, lane: Lane, limits: Limits, mono: float, wall: float, priority: int | None = None) -> float:
        """The monotonic time at which a send in ``lane`` (of ``priority``, if known) may go
        (``<= mono``: now)."""
        at = float("-inf")
        if self.last_any is not None:
            at = self.last_any + limits.min_interval_s * self.multiplier + self.jitter
        reserved = lane == "batch" and (priority is None or priority >= limits.reserve_from_priority)
        if reserved and self.last_batch is not None:
            at = max(at, self.last_batch + limits.batch_interval_s * self.multiplier + self.jitter)
        if self.quiet_until is not None:
            at = max(at, self.quiet_until)
        for name, size, cap, batch_cap in limits.windows():
            kept = self.windows.get(name)
            total, batch = (0, 0) if kept is None else (kept.total, kept.batch)  # none kept yet: no sends
            if total < cap and (lane != "batch" or batch < batch_cap):
                continue  # a window rolled over only ever counts fewer
            w = self._window(name, size, limits, wall)
            if w.total >= cap or (lane == "batch" and w.batch >= batch_cap):
                at = max(at, mono + w.end - wall)  # the window's end
        if lane == "batch":
            at = max(at, mono + limits.quiet_remaining(wall))
            if reserved and self.batch_hold_until is not None:
                at = max(at, self.batch_hold_until)
        return at

    def drain(self, limits: Limits) -> Drain:
        """How the guid's batch queue goes out from now: at its batch interval and mean
        jitter, slowed by its penalty as clean sends wear it down. Window caps and quiet hours
        only ever make it slower, and a rate limit to come cannot be known, so shedding by it
        sheds no more than it must."""
        base, m, d = limits.batch_interval_s, self.multiplier, limits.penalty_decay
        interval = base + limits.mean_jitter_s
        if m <= 1.0:
            return Drain(interval)
        if d >= 1.0:  # a penalty that never wears off
            return Drain(interval + base * (m - 1))
        return Drain(interval, base, m, d, math.ceil(math.log(m) / -math.log(d)))

    def sent(self, lane: Lane, limits: Limits, mono: float, wall: float, rng: random.Random,
             job_interval_s: float | None = None) -> None:
        """Record a send. ``job_interval_s``: the sending job's own (slower) rate, which spaces
        the guid's next batch send; online traffic is never held by a job's rate."""
        self.multiplier = max(1.0, self.multiplier * limits.penalty_decay)
        self._mark(lane, limits, mono, rng)
        self.batch_hold_until = None if job_interval_s is None else mono + job_interval_s + self.jitter
        self.counted(lane, limits, wall)

    def counted(self, lane: Lane, limits: Limits, wall: float) -> None:
        """Count a claim of the guid's in its windows, sent or not, as the database counts
        every claim (``pacer_count_send_windows``): a send, or an item claimed and then not
        sent (it gave its turn up, came too late, was deferred by Pacer, was rate-limited).
        No spacing, no penalty: a media upload or status poll (no claim) is never counted
        (:meth:`stepped`)."""
        for name, size in WINDOWS:  # every window, capped or not: a cap set later counts today's sends
            w = self._window(name, size, limits, wall)
            w.total += 1
            w.batch += lane == "batch"

    def _window(self, name: str, size: int, limits: Limits, wall: float) -> _Window:
        """The guid's window ``name`` at ``wall``: the last one, or the next once it has ended,
        starting again at zero unless the last one overlaps it (its sends may fall in it)."""
        w = self.windows.setdefault(name, _Window())
        if w.end <= wall:
            start, end = limits.window(name, size, wall)
            if w.end <= start:
                w.total, w.batch = 0, 0
            w.end = end
        return w

    def stepped(self, lane: Lane, limits: Limits, mono: float, rng: random.Random) -> None:
        """A call that is no send (a media upload or status poll the gateway took): it takes a
        pacing slot, so the guid's next call is spaced from it as from a send, and uploads or
        polls never go out back to back; but it claimed nothing, so no window counts it (the
        windows count claims, as the database does), and it is no clean send, so it wears no
        rate-limit penalty down."""
        self._mark(lane, limits, mono, rng)

    def slowed(self, lane: Lane, limits: Limits, mono: float, rng: random.Random,
               quiet_s: float | None = None) -> None:
        """A rate-limited rejection answered at ``mono``: slow down before anything is retried.
        Each one in a row multiplies the interval again, up to ``max_penalty`` times the
        configured one. ``quiet_s``: the quiet the gateway asked for (its ``Retry-After``): no
        call of the guid, online or batch, until that long after the answer; the slower pace
        follows it."""
        self.multiplier = min(limits.max_penalty, self.multiplier * limits.rate_limited_penalty)
        self._mark(lane, limits, mono, rng)
        if quiet_s is not None and quiet_s > 0:
            self.hush(mono + quiet_s)

    def hush(self, until: float) -> None:
        """No call of the guid, online or batch, before ``until`` (monotonic): a quiet a gateway
        asked of it that another caller was given (a lookup's ``Retry-After``)."""
        self.quiet_until = until if self.quiet_until is None else max(until, self.quiet_until)

    def unanswered(self, lane: Lane, limits: Limits, mono: float, wall: float, rng: random.Random,
                   job_interval_s: float | None = None) -> None:
        """A send the gateway did not answer in time (in doubt): it may have been delivered,
        and a slow gateway may yet act on it at any moment. It counts as a send (windows and
        caps), and the guid slows down as after a rate limit — a bounded backoff on the same
        guid — so that its next send is not seen right behind the late one; each one in a row
        slows it more, clean sends recover."""
        self.sent(lane, limits, mono, wall, rng, job_interval_s)
        self.slowed(lane, limits, mono, rng)

    def _mark(self, lane: Lane, limits: Limits, mono: float, rng: random.Random) -> None:
        self.jitter = limits.jitter(rng)
        self.last_any = mono
        self.handed_over = False
        if lane == "batch":
            self.last_batch = mono

    def rested(self, mono: float, limits: Limits) -> bool:
        """No batch send (nor, after a handover, any send of the previous owner) within one
        batch interval."""
        return self.last_batch is None or mono - self.last_batch >= limits.batch_interval_s

    def spread_start(self, mono: float, limits: Limits, fraction: float) -> None:
        """Hold the guid's first campaign send for ``fraction`` (0 to 1, drawn by the caller)
        of a spread window, as if its last batch send had been that much less than an interval
        ago; a later send already recorded stands. For a rested guid that batch work reaches:
        the guids that get work together (a sender starting, a partition moving to it, a
        campaign starting on guids it holds) then start spread out, not as one burst that comes
        round again every interval. Online and urgent work are not held (they are not spaced by
        the batch lane).

        The window is one batch interval, except for a guid handed over with its previous
        owner's last send known: its window is how long it has been overdue (capped at one
        interval). The guids that fell due while the handover took its time then go out over
        as long as they waited, which is the rate they fell due at, and a guid is not made to
        wait up to a whole interval more for a handover that cost it a few seconds."""
        window = limits.batch_interval_s
        if self.handed_over and self.last_batch is not None:
            window = min(window, max(0.0, mono - self.last_batch - limits.batch_interval_s))
        held = mono + fraction * window - limits.batch_interval_s
        self.last_batch = held if self.last_batch is None else max(self.last_batch, held)

    def rest(self, mono: float, limits: Limits) -> None:
        """Wear this guid's own penalty down by the time since its last send here, as a taken
        lease's row penalty is (:func:`rested_penalty`): a guid given back idle and taken again
        a day later is not slowed by a rate limit it met before."""
        if self.last_any is not None and self.multiplier > 1.0:
            self.multiplier = rested_penalty(self.multiplier, mono - self.last_any, limits)

    def resume_after(self, mono: float, since_last_send_s: float | None, limits: Limits,
                     windows: dict[str, tuple[int, float]] | None = None, penalty: float | None = None,
                     quiet_s: float | None = None) -> None:
        """Carry the spacing, the window counts, the rate-limit penalty and the gateway's quiet
        over a handover: the previous owner's sends still count, and a guid the gateway
        rate-limited under it is not paced as if it never had been (``penalty``: the
        multiplier the row keeps, at most this sender's ``max_penalty``; ``quiet_s``: what is
        left of the quiet a ``Retry-After`` asked for, during which no call of the guid goes).
        ``windows``: name → (sends, the epoch second the window ends), as the database keeps
        them. The row counts every send begun under any owner, so its windows replace this
        sender's own, ended or not: each is the guid's last window, which the next one carries
        where they overlap (:meth:`_window`). The
        previous owner's lane split is not known, so its sends count against the batch share
        too (never more sends than the limits allow). The penalty is worn down by the time
        since the guid's last send (:func:`rested_penalty`): a guid quiet for a day is not
        slowed by a rate limit it met before."""
        self.windows = {name: _Window(end, n, n) for name, (n, end) in (windows or {}).items() if name in SIZES}
        self.rest(mono, limits)
        if quiet_s is not None and quiet_s > 0:
            self.hush(mono + quiet_s)
        if penalty is not None:
            if since_last_send_s is not None:
                penalty = rested_penalty(penalty, since_last_send_s, limits)
            self.multiplier = max(self.multiplier, min(penalty, limits.max_penalty))
        if since_last_send_s is not None:
            self.handed_over = True
            before = mono - since_last_send_s
            self.last_any = before if self.last_any is None else max(self.last_any, before)
            self.last_batch = before if self.last_batch is None else max(self.last_batch, before)


def quiet_left(ends: float | None, now: float) -> float | None:
    """What is left at ``now`` of a quiet that ends at ``ends``, both on one clock (None: no
    quiet, or it is over). Seconds asked for and the seconds since they were reckoned are one
    such pair: ``quiet_left(quiet_s, elapsed)``."""
    return None if ends is None or ends <= now else ends - now


def rested_penalty(penalty: float, since_last_send_s: float, limits: Limits) -> float:
    """The penalty a guid would be down to had it gone on sending cleanly at its slowed pace
    since its last send: each send at ``m`` times the batch interval wears ``m`` by the factor
    ``penalty_decay``, about ``(1 - decay) / batch_interval`` of the multiplier per second."""
    if limits.penalty_decay >= 1.0 or limits.batch_interval_s <= 0:  # never worn, or nothing to slow
        return penalty
    return max(1.0, penalty - max(0.0, since_last_send_s) * (1 - limits.penalty_decay) / limits.batch_interval_s)


@dataclass(frozen=True)
class Drain:
    """When each item of a guid's batch queue goes out, sent in order from now: one send per
    ``interval_s`` (the batch interval and the mean jitter), and for each of the first
    ``sends`` sends ``base_s × (penalty × decay**k − 1)`` more, the ``k``-th send's share of
    a rate-limit penalty that clean sends wear down (``decay`` each) until it is gone.
    ``adapters/sql/shed.sql`` computes the same."""
    interval_s: float
    base_s: float = 0.0
    penalty: float = 1.0
    decay: float = 0.5
    sends: int = 0

    def at(self, position: int) -> float:
        """Seconds from now until the item at ``position`` (from 1) goes out."""
        k = min(position, self.sends)
        slowed = self.penalty * (1 - self.decay**k) / (1 - self.decay) - k
        return position * self.interval_s + self.base_s * slowed

    def __str__(self) -> str:
        if self.sends:
            return (f"one batch send per {self.interval_s:.1f} s, its first {self.sends} slowed by a rate-limit "
                    f"penalty of ×{self.penalty:.1f} wearing off")
        return f"one batch send per {self.interval_s:.1f} s"


@dataclass
class ClaimAhead:
    """How long before a guid's pacing gap ends its next item is claimed, so that the gateway
    call starts when the gap ends, not a claim's write later. A send is spaced from the
    previous one's answer; a claim begun only once the gap is over (the step's linger, its
    statement, a busy loop) adds its duration to every gap, which at one send a second is
    several per cent of a guid's rate.

    The lead is the claims' recent duration, tracked as a peak that decays: a slow claim
    raises it at once, each faster one lowers it by ``decay`` — the call then starts at the
    gap's end for all but the slowest claims. Capped at ``cap_s`` (0: no claim ahead). The
    call itself never starts before the gap ends; what a lead costs is a claimed item held
    that long, and an online item arriving in that instant waiting one more send."""

    cap_s: float = 0.0
    decay: float = 0.9
    estimate_s: float = 0.0

    def observe(self, claim_s: float) -> None:
        """A claim took ``claim_s`` (from asking for it to its answer)."""
        self.estimate_s = max(claim_s, self.estimate_s * self.decay)

    @property
    def lead_s(self) -> float:
        return min(self.cap_s, self.estimate_s)
