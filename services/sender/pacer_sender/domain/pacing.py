"""Per-guid pacing: a minimum interval plus a random gap, never a fixed rhythm."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class PacingPolicy:
    min_interval_s: float = 1.0
    jitter_s: float = 0.5  # uniform extra gap in [0, jitter_s)
    rate_limited_penalty: float = 2.0  # interval multiplier after a rate-limited rejection
    penalty_decay: float = 0.9  # each clean send brings the multiplier back toward 1

    def gap(self, rng: random.Random, multiplier: float = 1.0) -> float:
        """Seconds to wait after a send before the next one for the same guid."""
        return self.min_interval_s * multiplier + (rng.random() * self.jitter_s if self.jitter_s > 0 else 0.0)


@dataclass
class GuidPace:
    """When this guid may send next. Times are monotonic seconds."""

    next_at: float = 0.0
    multiplier: float = 1.0

    def wait(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def sent(self, now: float, policy: PacingPolicy, rng: random.Random) -> None:
        self.multiplier = max(1.0, self.multiplier * policy.penalty_decay)
        self.next_at = now + policy.gap(rng, self.multiplier)

    def slowed(self, now: float, policy: PacingPolicy, rng: random.Random) -> None:
        """A rate-limited rejection: slow down before anything is retried."""
        self.multiplier = min(32.0, self.multiplier * policy.rate_limited_penalty)
        self.next_at = now + policy.gap(rng, self.multiplier)

    def resume_after(self, now: float, since_last_send_s: float | None, policy: PacingPolicy) -> None:
        """Carry the spacing over a handover: the previous owner's last send still counts."""
        if since_last_send_s is not None:
            self.next_at = max(self.next_at, now + policy.min_interval_s * self.multiplier - since_last_send_s)
