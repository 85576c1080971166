"""Settings shared by every service: built in ``main()`` from ``PACER_*`` variables, never at import.

Each service composes these into its own frozen settings class with its own sub-prefix
(``PACER_SENDER_…``); the shared parts (``PACER_DATABASE_URL``, ``PACER_KAFKA_…``) are read
under the common prefix so one environment drives every service.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# A garbage collector threshold: 0 would switch collection off (gen0) or collect the older
# generation at every younger one's collection, neither a setting to reach by a typo.
_GcThreshold = Annotated[int, Field(ge=1, le=10_000_000)]


def _not_zero(hours: int) -> int:
    if hours == 0:
        raise ValueError("0 hours would delete records as soon as they are written: give hours, or -1 for ever")
    return hours


# A topic's retention in hours: at least one, or -1 for ever (Kafka's `retention.ms=-1`).
_RetentionHours = Annotated[int, Field(ge=-1), AfterValidator(_not_zero)]


_HTTP_URL = re.compile(r"https?://[^/?#\s]+")  # as values.schema.json's gateway.url


def _http_url(url: str) -> str:
    """Refused at start-up, not at the first send: without its scheme (``wecom-gateway:8080``)
    a gateway URL is taken for one of another scheme, whose every request fails before the
    sender can know it was not sent, so each send would end in doubt, then ``unverified``."""
    if not _HTTP_URL.match(url):
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host, "
                         "e.g. http://wecom-gateway:8080 (the scheme cannot be left out)")
    return url


# The base URL of a gateway, as a setting (PACER_GATEWAY_URL).
GatewayUrl = Annotated[str, AfterValidator(_http_url)]


class _Frozen(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_")


class PostgresSettings(_Frozen):
    database_url: SecretStr = Field(description=(
        "libpq URL of the Pacer database, e.g. "
        "`postgresql://pacer:PASSWORD@db.internal:5432/pacer?sslmode=require`. Kept as a secret value: not "
        "printed in settings dumps."
    ))
    pool_min: int = Field(2, description=(
        "Parsed, but not used by any service: pool sizes are set per service (see [fixed in code](#fixed-in-code)"
        " and `PACER_SENDER_DB_POOL_MAX`)."
    ))
    pool_max: int = Field(10, description="Parsed, not used (as above).")


class KafkaSettings(_Frozen):
    kafka_bootstrap_servers: str = Field(description="`host:port[,host:port…]`, librdkafka `bootstrap.servers`.")
    topic_prefix: str = Field("pacer", description=(
        "Topic names are `<prefix>.job-requests`, `<prefix>.job-requests.dlq`, "
        "`<prefix>.item-commands.{online,batch}`, `<prefix>.item-outcomes`, `<prefix>.callbacks`, "
        "`<prefix>.callbacks.dlq`. It is also the default consumer-group"
        " prefix (`<prefix>.planner`, `<prefix>.sender`)."
    ))
    item_command_partitions: int = Field(16, description=(
        "Partitions of `<prefix>.item-commands.{online,batch}`, used only by `pacer topics` when it creates that "
        "topic. It does not change an existing topic. It is the ceiling for useful sender replicas. Take a count "
        "that divides 5760 (16, 24, 32, 48, 64, 96, 128, …): with another, each sender's sweep for lost doorbells "
        "walks every queued guid instead of its own partitions' (docs/runbook.md, \"Deploy with Helm\")."
    ))
    # How long each topic keeps its records (`retention.ms`), set by `pacer topics` when it creates
    # a topic and applied by it to an existing one. Hours; -1 keeps them for ever (Kafka's own -1).
    topic_retention_requests_hours: _RetentionHours = Field(168, description=(
        "Hours `<prefix>.job-requests` keeps a request. A request lives only here until a planner stores it: "
        "this must outlast the longest planner outage you plan for."
    ))
    topic_retention_commands_hours: _RetentionHours = Field(72, description=(
        "Hours `<prefix>.item-commands.{online,batch}` keep a command. A command is a doorbell (its item is in "
        "Postgres and is sent from there whatever happens to the command), so this only has to outlast a "
        "sender outage for the wake-up to be prompt."
    ))
    topic_retention_outcomes_hours: _RetentionHours = Field(168, description=(
        "Hours `<prefix>.item-outcomes` keeps an item's event for business consumers: longer than the longest "
        "outage of any of them. Postgres keeps the events as long as `PACER_RECONCILER_RETAIN_ITEMS_DAYS`."
    ))
    topic_retention_callbacks_hours: _RetentionHours = Field(168, description=(
        "Hours `<prefix>.callbacks` keeps a gateway callback for its readers (the reconcilers; business services "
        "for `message.received`): longer than the longest outage of any of them. A media whose readiness "
        "callback is gone is still resolved by polling."
    ))
    topic_retention_dead_letters_hours: _RetentionHours = Field(2160, description=(
        "Hours `<prefix>.job-requests.dlq` and `<prefix>.callbacks.dlq` keep what was refused, as it came and "
        "with its reason: the only copy of it. 90 days by default; -1 keeps it for ever."
    ))
    kafka_security: dict[str, str] = Field(default_factory=dict, description=(
        "Extra librdkafka settings merged into every Kafka client (producers, consumers, the admin client of "
        "`pacer topics`). Values must be JSON strings. Example: "
        '`{"security.protocol":"SASL_SSL","sasl.mechanisms":"SCRAM-SHA-512","sasl.username":"pacer",'
        '"sasl.password":"…","ssl.ca.location":"/etc/pacer/ca.pem"}`.'
        " It carries credentials: give it from a secret."
    ))

    def retention_ms(self, hours: int) -> str:
        """A topic's ``retention.ms`` for a retention of ``hours`` (-1: for ever)."""
        return "-1" if hours < 0 else str(hours * 3_600_000)

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

    @property
    def callbacks(self) -> str:
        """Gateway callbacks as the intake received them (key = guid, header ``pacer-tenant``)."""
        return f"{self.topic_prefix}.callbacks"

    @property
    def callbacks_dlq(self) -> str:
        return f"{self.topic_prefix}.callbacks.dlq"

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_security}


class ControlClientSettings(_Frozen):
    """Where the command line finds the Control API (``make up`` prints both), and as whom it calls."""

    control_url: str = Field(description="the Control API's base URL, e.g. http://127.0.0.1:9104/api/v1")
    token: SecretStr = Field(description="an API token (`pacer token create`); its role decides what is allowed")
    control_timeout_s: float = 30.0


class OpsSettings(_Frozen):
    """Where a service serves /healthz, /readyz and /metrics."""

    ops_host: str = Field("127.0.0.1", description=(
        "Address the ops HTTP server (`/healthz`, `/readyz`, `/metrics`) binds to. In a container set it to "
        "`0.0.0.0`, or probes and scrapes cannot reach it."
    ))
    log_level: str = Field("INFO", description=(
        "Python logging level name (`DEBUG`, `INFO`, `WARNING`, `ERROR`), any case. Logs are JSON, one object per"
        " line, on stderr."
    ))
    gc_thresholds: tuple[_GcThreshold, _GcThreshold, _GcThreshold] = Field((50_000, 20, 20), description=(
        "Python's cyclic garbage collector thresholds (`gc.set_threshold`), as a JSON list "
        "`[gen0, gen1, gen2]`. Python's default `[700, 10, 10]` made a sender with 10,000 guids spend 20–40% "
        "of its time in full collections of its long-lived heap (0.3–0.6 s each, several per 10 s); objects "
        "not in a cycle are freed by reference counting whatever the thresholds. Time spent collecting: "
        "`pacer_gc_pause_seconds_total`. Each value from 1 to 10,000,000."
    ))
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop", description=(
        "The event loop the service runs on: `uvloop` (libuv's, in C) or Python's own `asyncio` loop. The service"
        " behaves the same on either; on uvloop a sender spends about a tenth less CPU per send at 10,000 guids"
        " (docs/performance.md, \"uvloop\"). `asyncio` is there to rule the loop out when chasing a problem."
    ))
    loop_stall_s: float = Field(2.0, gt=0, description=(
        "A service whose event loop has not run for this many seconds (a blocking call holds it: nothing else "
        "runs meanwhile, no sends, no lease renewals, no logs) logs a warning with the stack its loop's thread "
        "is in, and another when the loop runs again. `pacer_event_loop_lag_seconds` shows shorter holds."
    ))
