"""Why a Control API request cannot be served: one class per answer, one sentence each."""

from __future__ import annotations


class ControlError(Exception):
    """A request that cannot be served; the message is one sentence for the caller."""


class Unauthorized(ControlError):
    """No token, or one that is unknown or revoked."""


class Forbidden(ControlError):
    """The caller's role may not do this, or the target is not allowed (test sends)."""


class NotFound(ControlError):
    pass


class Conflict(ControlError):
    pass


class Invalid(ControlError):
    """Well-formed but not acceptable (a filter too wide, a value the database refuses)."""


class TooLarge(ControlError):
    """A request body larger than the service takes."""


class Unavailable(ControlError):
    """A dependency (the database, Kafka) cannot be reached right now; try again."""
