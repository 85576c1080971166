"""What the callback intake needs from the outside world: the tenants and the callback log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pacer_common.domain.tenants import Tenant

# The tenant of this name as last read (secrets included), or None if there is none.
Tenants = Callable[[str], Tenant | None]


class LogUnavailable(Exception):
    """The callback could not be appended (broker unreachable, queue full, no acknowledgement
    in time): the caller answers 503 and the gateway sends it again."""


class CallbackLog(Protocol):
    async def append(self, tenant: str, guid: str, raw: bytes) -> None:
        """Append a callback to ``<prefix>.callbacks`` (key = guid, header ``pacer-tenant``);
        returns once the brokers acknowledged it (acks=all), else raises :class:`LogUnavailable`."""
        ...

    async def dead_letter(self, tenant: str, raw: bytes, reason: str) -> None:
        """Append the original bytes to ``<prefix>.callbacks.dlq`` with the reason; acknowledged as above."""
        ...
