"""Whether an item command can be stored and sent as it stands."""

from __future__ import annotations

import uuid

from pacer_common.domain.commands import ItemCommand


def unsendable(cmd: ItemCommand) -> str | None:
    """Why ``cmd`` cannot be stored or sent (a readable reason), or None."""
    try:
        uuid.UUID(cmd.item_id)
    except ValueError:
        return f"item_id {cmd.item_id[:60]!r} is not a uuid"
    for name in ("guid", "to_id", "content", "idem_key"):
        value: str = getattr(cmd, name)
        if "\x00" in value:
            return f"{name} holds a NUL character, which can be neither stored nor sent"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{name} is not valid text ({exc.reason} at position {exc.start})"
    return None
