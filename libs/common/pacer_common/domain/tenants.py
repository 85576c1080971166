"""Tenants: one per gateway token (DESIGN.md "Tenants"), and the signature of their callbacks.

A tenant is its gateway's base URL, the bearer credential sent with every call, the secret
its gateway signs callbacks with (hex HMAC-SHA256 of the raw body, header ``X-Signature``)
and its quotas (``sends_per_day`` counted over its calendar day, as the database decides it:
``pacer_tenant_day``). The tenant ``default`` exists out of the box; fields it leaves empty
fall back to the settings (``PACER_GATEWAY_URL``, ``PACER_GATEWAY_CREDENTIAL``,
``PACER_INTAKE_DEFAULT_CALLBACK_SECRET``). Secrets are ``SecretStr``: never printed.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, replace

from pydantic import SecretStr

from pacer_common.domain.requests import DEFAULT_TENANT

# The largest callback body the intake may be set to take (PACER_INTAKE_MAX_BODY_BYTES); the
# callback topics take it with a mebibyte to spare for headers.
MAX_CALLBACK_BYTES = 8 * 1_048_576


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
        return replace(self, base_url=self.base_url or base_url, credential=self.credential or credential,
                       callback_secret=self.callback_secret or callback_secret)


def sign(secret: str, body: bytes) -> str:
    """What ``X-Signature`` holds for ``body`` signed with ``secret``: hex HMAC-SHA256."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_ok(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` signs ``body`` with ``secret`` (constant time; any case of hex). An
    empty secret signs nothing: anyone could sign with it."""
    if not secret or not signature:
        return False
    given = signature.strip().lower().encode("utf-8", "replace")  # a header may carry any byte
    return hmac.compare_digest(sign(secret, body).encode(), given)
