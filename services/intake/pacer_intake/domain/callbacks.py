"""What makes a gateway callback well-formed (DESIGN.md "Gateway contract, all actions", Callbacks).

A callback is a JSON object ``{"cmd", "guid", "ts", "data": {...}}``. The intake needs
``cmd`` and ``guid`` (the Kafka key) to append it, and appends the body byte for byte as
received. Any ``cmd`` is appended (consumers skip the ones they do not know), so a gateway
adding an event type needs no change here. The commands Pacer itself acts on
(``device.status``, ``media.ready``) are read here as the reconciler reads them
(``pacer_common.domain.callbacks``): one it could not act on is refused with the reason,
not appended for the reconciler to skip.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pacer_common.domain import callbacks as acted_on
from pacer_common.domain.callbacks import ACTED_ON, MAX_GUID_CHARS


class BadCallback(ValueError):
    """The body cannot be appended as a callback; the message says why, for people."""


@dataclass(frozen=True)
class Callback:
    cmd: str
    guid: str


def parse(raw: bytes) -> Callback:
    """The callback in ``raw``, or :class:`BadCallback` with the reason."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadCallback("not UTF-8 text") from None
    except ValueError as exc:
        raise BadCallback(f"not JSON: {exc}") from None
    except RecursionError:
        raise BadCallback("not JSON this service reads: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadCallback(f"not a JSON object but {type(body).__name__}")
    cmd, guid, data = body.get("cmd"), body.get("guid"), body.get("data")
    if not isinstance(cmd, str) or not cmd:
        raise BadCallback("missing 'cmd' (a non-empty string)")
    if not isinstance(guid, str) or not guid:
        raise BadCallback("missing 'guid' (a non-empty string)")
    if len(guid) > MAX_GUID_CHARS or "\x00" in guid:
        raise BadCallback(f"'guid' is not a guid (over {MAX_GUID_CHARS} characters, or a NUL character)")
    if data is not None and not isinstance(data, dict):
        raise BadCallback("'data' must be an object")
    if cmd in ACTED_ON:
        try:
            acted_on.parse(raw)
        except acted_on.BadCallback as exc:
            raise BadCallback(str(exc)) from None  # the reason the reconciler would have skipped it for
    return Callback(cmd, guid)
