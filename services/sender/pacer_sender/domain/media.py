"""When a media item may be sent: its media (one per url per guid) must be ``ready``.

The first item of a media on a guid uploads it; the gateway answers ``pending`` or
``ready``. Readiness then comes by a ``media.ready`` callback (the reconciler writes it), or,
when none came within ``poll_after`` of the upload, by the sender asking ``/media/status``
(then at most every ``poll_every``). Until then the item waits, pending, and looks again
every ``recheck`` (a cheap read of the media row). A ``failed`` media fails the item with
the gateway's reason; so does a status poll the gateway refuses (``bad_params``: it does not
know the media id). A send is never made into media that is not ready.

An upload serves the guid's later items of the same url for ``reuse`` (WeCom keeps temporary
media three days); after that the next item uploads it again, as the next ``generation``, under
an idempotency key of its own. A failed upload is tried again after ``reuse`` too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


@dataclass(frozen=True)
class MediaRow:
    media_id: str
    status: Literal["pending", "ready", "failed"]
    reason: str | None
    uploaded_at: datetime
    checked_at: datetime | None
    generation: int = 0


@dataclass(frozen=True)
class MediaTiming:
    poll_after: timedelta = timedelta(seconds=30)
    poll_every: timedelta = timedelta(seconds=10)
    recheck: timedelta = timedelta(seconds=2)
    reuse: timedelta = timedelta(days=2)


Step = Literal["upload", "poll", "send", "fail", "wait"]


def next_step(row: MediaRow | None, now: datetime, t: MediaTiming) -> tuple[Step, datetime | None]:
    """What to do for an item of this media now; for ``wait``, until when."""
    if row is None or now >= row.uploaded_at + t.reuse:
        return "upload", None
    if row.status == "ready":
        return "send", None
    if row.status == "failed":
        return "fail", None
    poll_at = row.uploaded_at + t.poll_after
    if row.checked_at is not None:
        poll_at = max(poll_at, row.checked_at + t.poll_every)
    if now >= poll_at:
        return "poll", None
    return "wait", min(poll_at, now + t.recheck)


def next_generation(row: MediaRow | None) -> int:
    """The generation an upload made now has: the first is 0, each upload again one more."""
    return 0 if row is None else row.generation + 1


def upload_key(guid: str, url_hash: str, generation: int) -> str:
    """The upload's idempotency key: an upload repeated after a crash is the same upload; an
    upload again after ``reuse`` is a new one."""
    return f"media:{guid}:{url_hash}" + (f":{generation}" if generation else "")
