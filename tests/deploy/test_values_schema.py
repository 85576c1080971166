"""values.schema.json: helm refuses a wrong type or an unknown key instead of rendering it."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from pacer_common.domain.segments import EVENT_SEGMENTS_MAX, EVENT_SEGMENTS_MIN
from pacer_dev.chart.check import CHART, lint, template
from pacer_reconciler.settings import ReconcilerSettings

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
], ids=["wrong type", "misspelt key", "out of range", "misspelt nested key", "unknown failure class",
        "unknown log level", "senders scaled to zero"])
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
