"""Settings shared by every service: built in ``main()`` from ``PACER_*`` variables, never at import.

Each service composes these into its own frozen settings class with its own sub-prefix
(``PACER_SENDER_…``); the shared parts (``PACER_DATABASE_URL``, ``PACER_KAFKA_…``) are read
under the common prefix so one environment drives every service.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class _Frozen(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_")


class PostgresSettings(_Frozen):
    database_url: SecretStr = Field(description="libpq URL of the Pacer database")
    pool_min: int = 2
    pool_max: int = 10


class KafkaSettings(_Frozen):
    kafka_bootstrap_servers: str = Field(description="Kafka bootstrap servers, host:port[,…]")
    topic_prefix: str = "pacer"
    item_command_partitions: int = 16
    kafka_security: dict[str, str] = Field(
        default_factory=dict, description="extra librdkafka settings (JSON), e.g. SASL/SSL"
    )

    @property
    def job_requests(self) -> str:
        return f"{self.topic_prefix}.job-requests"

    @property
    def job_requests_dlq(self) -> str:
        return f"{self.topic_prefix}.job-requests.dlq"

    def item_commands(self, lane: str) -> str:
        """The command topic of a lane: ``online`` (takeover prompts, auto-replies) or ``batch``."""
        return f"{self.topic_prefix}.item-commands.{lane}"

    @property
    def item_outcomes(self) -> str:
        return f"{self.topic_prefix}.item-outcomes"

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_security}


class ControlClientSettings(_Frozen):
    """Where the command line finds the Control API (``make up`` prints both), and as whom it calls."""

    control_url: str = Field(description="the Control API's base URL, e.g. http://127.0.0.1:9104/api/v1")
    token: SecretStr = Field(description="an API token (`pacer token create`); its role decides what is allowed")
    control_timeout_s: float = 30.0


class OpsSettings(_Frozen):
    """Where a service serves /healthz, /readyz and /metrics."""

    ops_host: str = "127.0.0.1"
    log_level: str = "INFO"
