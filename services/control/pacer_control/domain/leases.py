"""What a forced release of a guid's lease means for a sender that may still be running."""

from __future__ import annotations


def release_note(guid: str, owner: str, epoch: int) -> str:
    return (
        f"lease of guid {guid} released (was held by {owner!r}, epoch {epoch}). A sender still running "
        f"believes it holds the lease until its next renewal (every third of the lease TTL), when it sees "
        f"the epoch change and drops the guid; until then pacer_begin_send refuses its sends, because it "
        f"only lets the lease's current owner claim an item (fencing). Whichever sender acquires the guid "
        f"next gets epoch {epoch + 1}."
    )
