"""Generated parts of the docs: the settings tables of docs/configuration.md and the metric
list of docs/runbook.md, from the code (``make docs``; a test fails when they differ).

Each generated part sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``;
the prose around it is written by hand. The meaning of a setting is its ``Field(description=…)``,
the meaning of a metric its help text.
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

REPO = Path(__file__).resolve().parents[3]
CONFIGURATION = REPO / "docs" / "configuration.md"
RUNBOOK = REPO / "docs" / "runbook.md"

# Table name in the doc → settings class, and the prefix shown for its variables.
SETTINGS: dict[str, tuple[str, str | None]] = {
    "PostgresSettings": ("pacer_common.settings:PostgresSettings", None),
    "KafkaSettings": ("pacer_common.settings:KafkaSettings", None),
    "OpsSettings": ("pacer_common.settings:OpsSettings", "PACER_<SERVICE>_"),
    "PlannerSettings": ("pacer_planner.settings:PlannerSettings", None),
    "SenderSettings": ("pacer_sender.settings:SenderSettings", None),
    "ReconcilerSettings": ("pacer_reconciler.settings:ReconcilerSettings", None),
    "ControlSettings": ("pacer_control.settings:ControlSettings", None),
    "IntakeSettings": ("pacer_intake.settings:IntakeSettings", None),
}
# Service → the class that declares all its metrics (in its ``metrics`` module).
METRICS = {
    "planner": "pacer_planner.metrics:PlannerMetrics",
    "sender": "pacer_sender.metrics:SenderMetrics",
    "reconciler": "pacer_reconciler.metrics:ReconcilerMetrics",
    "control": "pacer_control.metrics:ControlMetrics",
    "intake": "pacer_intake.metrics:IntakeMetrics",
}
_BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)
_SIMPLE = {int: "int", float: "float", str: "string", bool: "bool", SecretStr: "string (secret)"}


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _type(annotation: Any, key: bool = False) -> str:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in get_args(annotation) if a is not type(None)]
        return _type(inner, key)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin is tuple:
        return f"JSON list of {len(get_args(annotation))} {_type(get_args(annotation)[0])}"
    if origin is dict:
        k, v = get_args(annotation)
        return f"JSON object, {'code' if k is int else _type(k)} → {_type(v)}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "class"
    return _SIMPLE.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    return "".join(f" {signs[name]} {getattr(m, name)}" for m in field.metadata
                   if isinstance(m, annotated_types.BaseMetadata)
                   for name in signs if getattr(m, name, None) is not None)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        made = field.get_default(call_default_factory=True, validated_data={})
        if made in ({}, []):
            return f"`{made}`"
        return "built-in table" if isinstance(made, dict) else "per process"
    if field.default is None:
        return "unset"
    if field.default == "":
        return "empty"
    if isinstance(field.default, tuple):
        return f"`{list(field.default)}`"
    return f"`{field.default}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _variables(cls: type[BaseSettings], prefix: str | None = None) -> list[tuple[str, str, FieldInfo]]:
    """(variable, field name, field) of each setting of ``cls``."""
    prefix = prefix or cls.model_config.get("env_prefix", "")
    return [(field.validation_alias if isinstance(field.validation_alias, str) else f"{prefix}{name.upper()}",
             name, field) for name, field in cls.model_fields.items()]


def defaults() -> dict[str, str]:
    """Every variable of every settings class → its default as the docs show it."""
    return {var: _default(field) for path, prefix in SETTINGS.values()
            for var, _, field in _variables(_load(path), prefix)}


def settings_table(cls: type[BaseSettings], prefix: str | None = None) -> str:
    rows = ["| Variable | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for var, name, field in _variables(cls, prefix):
        if not field.description:
            raise ValueError(f"{cls.__name__}.{name} has no description: give it Field(description=…)")
        rows.append(f"| `{var}` | {_type(field.annotation)}{_bounds(field)} | {_default(field)} | "
                    f"{_cell(field.description)} |")
    return "\n".join(rows) + "\n"


def _metrics(holder: object) -> list[MetricWrapperBase]:
    """The metrics an object holds, in declaration order: attributes, dicts of them, nested
    holders (Pacer's own classes only: not functions, registries or library objects)."""
    found: list[MetricWrapperBase] = []
    for value in vars(holder).values():
        for v in value.values() if isinstance(value, dict) else [value]:
            if isinstance(v, MetricWrapperBase):
                found.append(v)
            elif type(v).__module__.startswith("pacer_") and hasattr(v, "__dict__"):
                found.extend(_metrics(v))
    return found


def metrics_table() -> str:
    """Every metric of every service, declared in a fresh registry (no server is started)."""
    rows = ["| Metric | Service | Type | Meaning |", "| --- | --- | --- | --- |"]
    for service, path in METRICS.items():
        for m in _metrics(_load(path)(CollectorRegistry())):
            name = m._name + ("_total" if m._type == "counter" else "")
            labels = "{" + ",".join(m._labelnames) + "}" if m._labelnames else ""
            rows.append(f"| `{name}{labels}` | {service} | {m._type} | {_cell(m._documentation)} |")
    return "\n".join(rows) + "\n"


def runbook(text: str | None = None) -> str:
    """docs/runbook.md with its metric list generated afresh."""
    return _fill(RUNBOOK.read_text() if text is None else text, lambda _: metrics_table())


def _fill(text: str, render: Callable[[str], str]) -> str:
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


def configuration(text: str | None = None) -> str:
    """docs/configuration.md with every settings table generated afresh."""
    def render(name: str) -> str:
        path, prefix = SETTINGS[name]
        return settings_table(_load(path), prefix)

    return _fill(CONFIGURATION.read_text() if text is None else text, render)


def main() -> None:
    for path, text in ((CONFIGURATION, configuration()), (RUNBOOK, runbook())):
        path.write_text(text)
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
