"""The generated parts of the docs match the code (`make docs` regenerates them)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from pacer_dev import docs


def test_configuration_tables_match_the_settings_classes():
    assert docs.configuration() == docs.CONFIGURATION.read_text(), \
        "docs/configuration.md differs from the settings classes: run `make docs` and commit it"


def test_every_settings_class_has_its_table():
    names = set(re.findall(r"<!-- generated: (\S+) -->", docs.CONFIGURATION.read_text()))
    assert set(docs.SETTINGS) <= names


def test_a_changed_default_or_meaning_shows_as_drift():
    class Demo(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="PACER_DEMO_")
        lease_ttl_s: float = Field(60.0, gt=0, description="How long a lease lasts | renewed every TTL/3.")
        group_id: str | None = Field(None, description="Consumer group.")

    table = docs.settings_table(Demo)
    assert "| `PACER_DEMO_LEASE_TTL_S` | float > 0 | `60.0` | How long a lease lasts \\| renewed every TTL/3. |" in table
    assert "| `PACER_DEMO_GROUP_ID` | string | unset | Consumer group. |" in table
    stale = "<!-- generated: X -->\n| old |\n<!-- end generated -->\n"
    assert docs._fill(stale, lambda _: table) != stale


def test_a_setting_without_a_meaning_is_refused():
    class Bare(BaseSettings):
        port: int = 9100

    with pytest.raises(ValueError, match=r"Bare\.port has no description"):
        docs.settings_table(Bare)


def test_readme_defaults_match_the_code():
    """The README's short table of the main settings names defaults the code must have."""
    readme = (docs.REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(PACER_[A-Z_]+)` \| `([^`]+)` \|", readme, re.MULTILINE)
    assert rows
    defaults = docs.defaults()
    for var, default in rows:
        assert _same(defaults[var].strip("`"), default), (var, defaults[var], default)


def _same(code: str, readme: str) -> bool:
    try:
        return float(code) == float(readme)
    except ValueError:
        return code == readme


def test_runbook_metric_list_matches_the_services_metrics():
    assert docs.runbook() == docs.RUNBOOK.read_text(), \
        "docs/runbook.md's metric list differs from the services' metrics.py: run `make docs` and commit it"


@pytest.mark.parametrize("service", sorted(docs.METRICS))
def test_every_registered_metric_is_listed(service):
    registry = CollectorRegistry()
    docs._load(docs.METRICS[service])(registry)
    table = docs.metrics_table()
    families = list(registry.collect())
    assert families, f"{service}'s metrics registered nothing"
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        assert f"| `{name}" in table, name
