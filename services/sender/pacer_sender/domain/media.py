"""When a media item may be sent: its media (one per url, kind and fileName per guid) must be ``ready``.

The first item of a media on a guid uploads it; the gateway answers ``pending`` or
``ready``. Readiness then comes by a ``media.ready`` callback (the reconciler writes it), or,
when none came within ``poll_after`` of the upload, by the sender asking ``/media/status``
(then at most every ``poll_every``). Until then the item waits, pending, and looks again
every ``recheck`` (a cheap read of the media row). A ``failed`` media fails the item with
the gateway's reason; so does a status poll the gateway refuses (``bad_params``: it does not
know the media id). A send is never made into media that is not ready.

An upload serves the guid's later items of the same media for ``reuse`` (WeCom keeps temporary
media three days); after that the next item uploads it again, as the next ``generation``, under
an idempotency key of its own. A failed upload is tried again after ``reuse`` too. A ``stale``
media (the gateway no longer knows it, e.g. after a restart) is uploaded again by the next
item, at once. A send refused with the gateway's bad_params code does not say which: the
code also covers a bad toId or a dissolved room. So the sender asks ``/media/status`` first,
and only a poll that the gateway refuses with bad_params too, or that answers ``failed``,
makes the media stale (``forgotten``); otherwise the refusal is the item's own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from pacer_common.domain.failures import FailureClass, SendError
from pacer_common.domain.status import ItemStatus
from pacer_sender.domain.decisions import Decision

# The error class of an item sent back to upload its media again (its ItemRetryScheduled
# event): an item with one such event already is not sent back a second time.
MEDIA_REFUSED = "media_refused"


def media_hash(url: str, kind: str, file_name: str | None) -> str:
    """What a guid's media record and its upload's idempotency key are keyed by: the url, the
    kind and the file name, for the gateway's mediaId carries all three (a file sent under
    another name, or a url sent as an image and as a file, is another media).

    Records made before kind and name were part of it were keyed by sha256 of the url alone,
    and the two can never meet: this hash's input starts with ``media/2``, which no url
    (``https?://…``, checked at intake) starts with, so an old record is never found under a
    new key; it is simply no longer read.
    """
    canonical = json.dumps([url, kind, file_name], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"media/2\n{canonical}".encode()).hexdigest()


@dataclass(frozen=True)
class MediaRow:
    media_id: str
    status: Literal["pending", "ready", "failed", "stale"]
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
    if row is None or row.status == "stale" or now >= row.uploaded_at + t.reuse:
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


def gateway_bad_params(err: SendError) -> bool:
    """Whether ``err`` is the gateway's own bad_params answer (a code, not an HTTP 4xx from
    whatever is in front of it). To a media send it says the request is wrong, not what is:
    the mediaId, the toId, the room (``forgotten`` tells)."""
    return err.failure_class is FailureClass.BAD_PARAMS and err.code is not None


def forgotten(status: str | None, poll_error: SendError | None) -> bool:
    """Whether the ``/media/status`` poll made after a media send's bad_params refusal says the
    gateway no longer knows the media: the poll refused with bad_params too, or the media
    ``failed``. Then the record is stale and the item uploads again, once. A ``ready`` media,
    or a poll that says nothing (transport, 5xx, a rate limit): the refusal is the item's own
    (a bad toId, a dissolved room), and it fails as bad_params, the record untouched."""
    if poll_error is not None:
        return gateway_bad_params(poll_error)
    return status == "failed"


def after_media_refusal(err: SendError, media_id: str, sent_back_before: bool, failed: Decision,
                        now: datetime) -> Decision:
    """A media send refused, its media ``forgotten`` by the gateway: the item goes back, once, to upload its media
    again. The gateway answered with a code, so nothing was delivered: the idempotency key is
    freed (as for any retry of a send that did not happen) and the attempt given back. An item
    sent back before whose send is refused again fails as ``failed`` (the bad_params decision)
    says, with a reason that says so."""
    if sent_back_before:
        return replace(failed, error=f"media {media_id} refused again after it was uploaded again: {err}")
    return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", MEDIA_REFUSED,
                    f"media {media_id} refused, uploading it again: {err}", next_attempt_at=now,
                    release_ledger=True, refund=True)


def upload_key(guid: str, url_hash: str, generation: int) -> str:
    """The upload's idempotency key: an upload repeated after a crash is the same upload; an
    upload again after ``reuse`` is a new one."""
    return f"media:{guid}:{url_hash}" + (f":{generation}" if generation else "")
