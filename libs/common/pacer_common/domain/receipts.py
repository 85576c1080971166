"""What the gateway answered for an accepted send: stored with the confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Receipt:
    code: int
    msg: str
    msg_id: str | None
    latency_ms: float

    def as_payload(self) -> dict[str, Any]:
        return {"code": self.code, "msg": self.msg, "msg_id": self.msg_id, "latency_ms": round(self.latency_ms, 2)}
