"""values.schema.json: helm refuses a wrong type or an unknown key instead of rendering it."""

from __future__ import annotations

import json

import jsonschema
import pydantic
import pytest
import yaml

from pacer_common.domain.requests import MAX_REQUEST_BYTES
from pacer_common.domain.segments import EVENT_SEGMENTS_MAX, EVENT_SEGMENTS_MIN
from pacer_common.domain.tenants import MAX_CALLBACK_BYTES
from pacer_control.settings import ControlSettings
from pacer_dev.chart.check import CHART, lint, template
from pacer_intake.settings import IntakeSettings
from pacer_reconciler.settings import ReconcilerSettings
from pacer_sender.settings import SenderSettings

MINIMAL = CHART / "ci" / "minimal-values.yaml"


def test_schema_is_valid_and_accepts_the_defaults():
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


@pytest.mark.parametrize("setting, complaint", [
    ("sender.replicas=abc", "replicas"),
    ("sender.replcas=3", "replcas"),
    ("kafka.itemCommandPartitions=0", "itemCommandPartitions"),
    ("networkPolicy.enable=true", "enable"),
    ("sender.failureCodes.45009=throttled", "failureCodes"),
    ("logLevel=verbose", "logLevel"),
    ("sender.keda.minReplicas=0", "minReplicas"),
    ("gateway.url=wecom-gateway:8080", "/gateway/url"),
    ("intake.maxBodyBytes=8388609", "maxBodyBytes"),
], ids=["wrong type", "misspelt key", "out of range", "misspelt nested key", "unknown failure class",
        "unknown log level", "senders scaled to zero", "gateway url without a scheme",
        "callback body over what the intake takes"])
def test_helm_refuses_bad_values(setting, complaint):
    for run in (lint(MINIMAL, "--set", setting), template("pacer", MINIMAL, "--set", setting)):
        assert run.returncode != 0, run.stdout
        assert complaint in run.stdout + run.stderr


def test_helm_accepts_good_values_given_the_same_way():
    assert lint(MINIMAL, "--set", "sender.replicas=3").returncode == 0
    assert template("pacer", MINIMAL, "--set", "sender.replicas=3").returncode == 0


def test_a_misspelt_key_in_a_values_file_is_refused(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"sender": {"pacing": {"minIntervalMS": 2000}}}))
    run = template("pacer", MINIMAL, "-f", str(values))
    assert run.returncode != 0
    assert "minIntervalMS" in run.stderr


def test_the_charts_segment_range_is_the_reconcilers():
    """The chart refuses what the reconciler and ``pacer migrate --event-segments`` refuse, no
    more and no less: its bounds for ``reconciler.segments`` are the setting's."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    bounds = schema["properties"]["reconciler"]["properties"]["segments"]
    assert (bounds["minimum"], bounds["maximum"]) == (EVENT_SEGMENTS_MIN, EVENT_SEGMENTS_MAX)
    field = ReconcilerSettings.model_fields["segments"]
    limits = {type(m).__name__: m for m in field.metadata}
    assert (limits["Ge"].ge, limits["Le"].le) == (EVENT_SEGMENTS_MIN, EVENT_SEGMENTS_MAX)


def test_the_charts_largest_callback_body_is_the_intakes():
    """A larger ``intake.maxBodyBytes`` would pass the chart and stop every intake pod at
    start-up, over and over: the chart's bound is the setting's."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    bounds = schema["properties"]["intake"]["properties"]["maxBodyBytes"]
    limits = {type(m).__name__: m for m in IntakeSettings.model_fields["max_body_bytes"].metadata}
    assert bounds["maximum"] == limits["Le"].le == MAX_CALLBACK_BYTES


def test_the_charts_largest_dry_run_is_the_control_services():
    """A larger ``control.dryRunMaxBytes`` would pass the chart and stop every control pod at
    start-up; the chart's default is the setting's (what tests/unit/test_dry_run_memory.py finds
    fits a control pod)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    bounds = schema["properties"]["control"]["properties"]["dryRunMaxBytes"]
    limits = {type(m).__name__: m for m in ControlSettings.model_fields["dry_run_max_bytes"].metadata}
    assert bounds["maximum"] == limits["Le"].le == MAX_REQUEST_BYTES
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["control"]["dryRunMaxBytes"] == ControlSettings.model_fields["dry_run_max_bytes"].default


@pytest.mark.parametrize("url", ["", "http://wecom-gateway:8080", "https://gw.example/api", "wecom-gateway:8080",
                                 "ftp://gw.example", "http://", "https:///message", " http://gw.example"])
def test_the_chart_takes_the_gateway_urls_the_services_take(url, monkeypatch):
    """Empty is left to the chart's own check (required with the sender or reconciler);
    any other URL passes the schema exactly when the sender and the reconciler start with it."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["gateway"]["properties"]["url"]
    charted = jsonschema.Draft7Validator(schema).is_valid(url)
    monkeypatch.setenv("PACER_GATEWAY_URL", url)
    for settings in (SenderSettings, ReconcilerSettings):
        try:
            settings()
        except pydantic.ValidationError:
            assert not charted or url == "", (settings.__name__, url)
        else:
            assert charted, (settings.__name__, url)
