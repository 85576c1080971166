"""What the gateway answered for an accepted send: stored with the confirmation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` as Postgres (jsonb, text) can hold it: NULs dropped, lone surrogates (which
    UTF-8 cannot encode) replaced by U+FFFD. A gateway's ``msg`` may carry either (a JSON
    ``\\u0000`` or ``\\ud800`` escape), and a delivered send must still confirm."""
    return _SURROGATE.sub("\ufffd", text.replace("\x00", ""))


@dataclass(frozen=True)
class Receipt:
    code: int
    msg: str
    msg_id: str | None
    latency_ms: float

    def as_payload(self) -> dict[str, Any]:
        """The receipt as stored, its texts made storable (:func:`storable_text`)."""
        msg_id: Any = self.msg_id  # as the gateway gave it (not always a string)
        return {"code": self.code, "msg": storable_text(self.msg),
                "msg_id": storable_text(msg_id) if isinstance(msg_id, str) else msg_id,
                "latency_ms": round(self.latency_ms, 2)}
