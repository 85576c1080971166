"""A circuit breaker for one tenant's gateway, kept in the process that calls it.

``threshold`` gateway failures in a row (the gateway unreachable, a 5xx, a timeout: not an
answer about one message) open it for ``cooldown_s``: calls are refused at once instead of
each waiting out a timeout. Then one call is let through as a probe: a success closes it, a
failure opens it again. One breaker per tenant, so a tenant whose gateway is down costs the
others nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Breaker:
    threshold: int = 5
    cooldown_s: float = 10.0
    failures: int = 0  # gateway failures in a row
    opened_at: float | None = None
    probing: bool = False  # the one call let through after the cool-down is out

    def wait(self, now: float) -> float | None:
        """None: call now (a probe, if it was open: this call takes it); else seconds until a
        call may go."""
        left = self.blocked(now)
        if left is None and self.opened_at is not None:
            self.probing = True
        return left

    def blocked(self, now: float) -> float | None:
        """What :meth:`wait` would answer now, without taking the probe: asked before the work
        that would lead to a call is begun."""
        if self.opened_at is None:
            return None
        left = self.opened_at + self.cooldown_s - now
        if left > 0:
            return left
        return self.cooldown_s if self.probing else None

    def record(self, failed: bool, now: float) -> None:
        if not failed:
            self.failures, self.opened_at, self.probing = 0, None, False
            return
        self.failures += 1
        if self.probing or self.failures >= self.threshold:
            self.opened_at = now
        self.probing = False

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None
