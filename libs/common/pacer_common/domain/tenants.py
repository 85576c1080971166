"""Tenants: one per gateway token (DESIGN.md "Tenants"), and the signature of their callbacks.

A tenant is its gateway's base URL, the bearer credential sent with every call, the secret
its gateway signs callbacks with (hex HMAC-SHA256 of the raw body, header ``X-Signature``)
and its quotas. The tenant ``default`` exists out of the box; fields it leaves empty fall back
to the settings (``PACER_GATEWAY_URL``, ``PACER_GATEWAY_CREDENTIAL``,
``PACER_INTAKE_DEFAULT_CALLBACK_SECRET``). Secrets are ``SecretStr``: never printed.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

from pacer_common.domain.requests import DEFAULT_TENANT


@dataclass(frozen=True)
class Tenant:
    name: str
    base_url: str | None = None
    credential: SecretStr | None = None
    callback_secret: SecretStr | None = None
    sends_per_day: int | None = None
    max_guids: int | None = None

    def with_defaults(self, base_url: str | None = None, credential: SecretStr | None = None,
                      callback_secret: SecretStr | None = None) -> Tenant:
        """The tenant with its empty fields filled from settings (only ``default`` takes them)."""
        if self.name != DEFAULT_TENANT:
            return self
        return Tenant(self.name, self.base_url or base_url, self.credential or credential,
                      self.callback_secret or callback_secret, self.sends_per_day, self.max_guids)


def sign(secret: str, body: bytes) -> str:
    """What ``X-Signature`` holds for ``body`` signed with ``secret``: hex HMAC-SHA256."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_ok(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` signs ``body`` with ``secret`` (constant time; any case of hex)."""
    if not signature:
        return False
    return hmac.compare_digest(sign(secret, body), signature.strip().lower())
