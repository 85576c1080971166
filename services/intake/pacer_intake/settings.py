"""The callback intake's settings (``PACER_INTAKE_*``), read in ``main()``."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from pacer_common.domain.tenants import MAX_CALLBACK_BYTES
from pacer_common.settings import OpsSettings


class IntakeSettings(OpsSettings):
    """``PACER_INTAKE_*``. Callbacks and /healthz, /readyz, /metrics share one port."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_INTAKE_")
    port: int = Field(9105, description="HTTP port of `POST /callbacks/{tenant}` and the ops endpoints.")
    default_callback_secret: SecretStr | None = Field(None, min_length=1, description=(
        "Callback secret of the `default` tenant, unless its row in `tenants` sets one (other tenants' secrets "
        "are in `tenants`, set with the Control API). Unset and unset there: the `default` tenant's callbacks are "
        "refused (401). Set but empty: the intake does not start (anyone could sign with it). A secret: never "
        "logged."
    ))
    tenants_refresh_s: float = Field(5.0, gt=0, description=(
        "How often tenants and their callback secrets are re-read from Postgres, in the background (a request "
        "never waits on the database): a new tenant or secret is honoured within this."
    ))
    max_body_bytes: int = Field(1_048_576, gt=0, le=MAX_CALLBACK_BYTES, description=(
        "Largest callback body accepted; larger: 413, unread. At most 8 MiB, what the callback topics take "
        "(`pacer topics`)."))
    ack_timeout_s: float = Field(5.0, gt=0, description=(
        "How long a callback waits for Kafka's acknowledgement (acks=all) before it is answered 503 (the gateway "
        "sends it again); also the producer's `message.timeout.ms`."
    ))
