"""One callback in: checked, appended to Kafka, answered. Nothing else on the request path.

Order: a body too large is refused unread; an unknown tenant is refused; the signature is
checked before anything is parsed or written (an unsigned body never reaches Kafka, not even
the dead-letter topic); a signed body that is not a callback is dead-lettered with its reason
and answered 400; a callback is appended and answered 200 once the brokers acknowledged it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from pacer_common.domain.tenants import signature_ok
from pacer_intake.domain.callbacks import BadCallback, parse
from pacer_intake.ports import CallbackLog, LogUnavailable, Tenants

log = logging.getLogger(__name__)

Result = Literal["accepted", "dead_lettered", "bad_signature", "unknown_tenant", "too_large", "unavailable"]
RESULTS: tuple[Result, ...] = ("accepted", "dead_lettered", "bad_signature", "unknown_tenant", "too_large",
                               "unavailable")
STATUS: dict[Result, int] = {"accepted": 200, "dead_lettered": 400, "bad_signature": 401, "unknown_tenant": 404,
                             "too_large": 413, "unavailable": 503}


@dataclass(frozen=True)
class Received:
    result: Result
    message: str

    @property
    def status(self) -> int:
        return STATUS[self.result]


class Intake:
    def __init__(self, tenants: Tenants, callbacks: CallbackLog, max_body_bytes: int = 1_048_576) -> None:
        self.tenants = tenants
        self.callbacks = callbacks
        self.max_body_bytes = max_body_bytes

    def known(self, tenant: str) -> bool:
        return self.tenants(tenant) is not None

    async def receive(self, tenant: str, raw: bytes | None, signature: str | None) -> Received:
        """``raw`` is None when the body was larger than ``max_body_bytes`` (and left unread)."""
        if raw is None or len(raw) > self.max_body_bytes:
            return Received("too_large", f"body over {self.max_body_bytes} bytes")
        t = self.tenants(tenant)
        if t is None:
            return Received("unknown_tenant", f"no tenant {tenant!r}")
        if t.callback_secret is None:
            log.warning("callback refused: tenant %r has no callback secret", tenant)
            return Received("bad_signature", "the tenant has no callback secret configured")
        if not signature_ok(t.callback_secret.get_secret_value(), raw, signature):
            return Received("bad_signature", "X-Signature is missing or does not sign this body")
        try:
            try:
                cb = parse(raw)
            except BadCallback as exc:
                await self.callbacks.dead_letter(tenant, raw, str(exc))
                log.warning("callback dead-lettered: %s", exc, extra={"tenant": tenant})
                return Received("dead_lettered", f"malformed callback, dead-lettered: {exc}")
            await self.callbacks.append(tenant, cb.guid, raw)
        except LogUnavailable as exc:
            log.warning("callback not appended: %s", exc, extra={"tenant": tenant})
            return Received("unavailable", "the callback log is unavailable; send it again")
        return Received("accepted", "ok")
