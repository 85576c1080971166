"""API tokens: roles and the one-way hash stored for a token.

A token is shown once, when it is made; the database keeps only its sha256, so a leaked
``api_tokens`` table grants nothing. Roles mirror the ``api_tokens.role`` CHECK constraint
(``migrations/0008_governance.sql``) and are cumulative: an admin may do everything a
tech_admin may, a tech_admin everything an operator may.
"""

from __future__ import annotations

import hashlib
import secrets
from enum import StrEnum


class Role(StrEnum):
    OPERATOR = "operator"
    TECH_ADMIN = "tech_admin"
    ADMIN = "admin"


# Higher rank = more rights; a role holds every right of the roles ranked below it.
RANK: dict[Role, int] = {Role.OPERATOR: 1, Role.TECH_ADMIN: 2, Role.ADMIN: 3}


def at_least(role: Role, needed: Role) -> bool:
    return RANK[role] >= RANK[needed]


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What ``api_tokens.token_hash`` holds for ``token``: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()
