"""Knobs of the fake gateway: defaults, validation and coercion from CLI/env/JSON.

Kept free of web imports so the same rules apply to start-up flags, environment
variables and runtime ``PUT /_admin/config`` updates.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

# Failure classes drawn from one uniform number, in this order, so that the
# probabilities are exclusive and their sum must not exceed 1.
EXCLUSIVE_FAILURE_KNOBS: tuple[str, ...] = (
    "p_http_5xx",
    "p_retryable",
    "p_needs_human",
    "p_bad_params",
    "p_rate_limited",
)
PROBABILITY_KNOBS: tuple[str, ...] = (*EXCLUSIVE_FAILURE_KNOBS, "p_drop_after_accept")
NON_NEGATIVE_KNOBS: tuple[str, ...] = (
    "latency_ms",
    "latency_jitter_ms",
    "drop_hang_ms",
    "min_interval_ms",
    "lookup_delay_ms",
    "retry_after_s",
)


class ConfigError(ValueError):
    """A knob value is unknown, of the wrong type or out of range."""


@dataclasses.dataclass(frozen=True)
class GatewayConfig:
    """Every behaviour knob of the fake gateway; immutable, replaced on update."""

    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    p_retryable: float = 0.0
    p_needs_human: float = 0.0
    p_bad_params: float = 0.0
    p_rate_limited: float = 0.0
    p_http_5xx: float = 0.0
    p_drop_after_accept: float = 0.0
    drop_hang_ms: float = 0.0
    fail_guids: Mapping[str, int] = dataclasses.field(default_factory=dict)
    min_interval_ms: float = 0.0
    guid_min_interval_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    seed: int | None = None
    lookup_unavailable: bool = False
    # Every /message/lookup waits this long before answering (a slow or hanging gateway).
    lookup_delay_ms: float = 0.0
    # > 0: a rate-limited send is answered HTTP 429 with ``Retry-After`` (this, in whole seconds
    # rounded up), and the guid must keep quiet that long: a send of it meanwhile is a violation.
    retry_after_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view of the knobs."""
        out = dataclasses.asdict(self)
        out["fail_guids"] = dict(self.fail_guids)
        out["guid_min_interval_ms"] = dict(self.guid_min_interval_ms)
        return out

    def updated(self, changes: Mapping[str, Any]) -> GatewayConfig:
        """Return a validated copy with ``changes`` (a partial update) applied."""
        coerced = {name: coerce_knob(name, value) for name, value in changes.items()}
        new = dataclasses.replace(self, **coerced)
        new.validate()
        return new

    def validate(self) -> None:
        """Raise ConfigError when knobs are inconsistent."""
        total = sum(getattr(self, name) for name in EXCLUSIVE_FAILURE_KNOBS)
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"sum of {', '.join(EXCLUSIVE_FAILURE_KNOBS)} must be <= 1, got {total:g}"
            )


KNOB_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GatewayConfig))


def config_from_mapping(raw: Mapping[str, Any]) -> GatewayConfig:
    """Build a config from knob values (strings from CLI/env, or JSON values)."""
    return GatewayConfig().updated(raw)


def coerce_knob(name: str, value: Any) -> Any:
    """Convert one knob value to its declared type, validating its range."""
    if name not in KNOB_NAMES:
        raise ConfigError(f"unknown knob {name!r}; known: {', '.join(KNOB_NAMES)}")
    if name in PROBABILITY_KNOBS:
        p = _as_float(name, value)
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"{name} must be within [0, 1], got {p:g}")
        return p
    if name in NON_NEGATIVE_KNOBS:
        v = _as_float(name, value)
        if v < 0:
            raise ConfigError(f"{name} must be >= 0, got {v:g}")
        return v
    if name == "seed":
        if value is None or value == "":
            return None
        return _as_int(name, value)
    if name == "lookup_unavailable":
        return _as_bool(name, value)
    if name == "fail_guids":
        codes = {str(k): _as_int(name, v) for k, v in _as_dict(name, value).items()}
        if any(code == 0 for code in codes.values()):
            raise ConfigError("fail_guids codes must be non-zero (0 means accepted)")
        return codes
    if name == "guid_min_interval_ms":
        intervals = {str(k): _as_float(name, v) for k, v in _as_dict(name, value).items()}
        if any(v < 0 for v in intervals.values()):
            raise ConfigError("guid_min_interval_ms values must be >= 0")
        return intervals
    raise ConfigError(f"no coercion rule for knob {name!r}")  # pragma: no cover


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    try:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"0", "false", "no", "off", ""}:
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{name} must be a boolean, got {value!r}")


def _as_dict(name: str, value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be an object mapping guid to value, got {value!r}")
    return value
