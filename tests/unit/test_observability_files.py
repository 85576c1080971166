"""The alert rules, their promtool unit tests, the runbook links and the dashboards, checked
with Debian's promtool (``make test`` installs it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pacer_dev import boards, prometheus

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "pacer"
RUNBOOK = ROOT / "docs" / "runbook.md"


def _rules() -> list[dict]:
    doc = yaml.safe_load(prometheus.RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _alerts() -> list[dict]:
    return [r for r in _rules() if "alert" in r]


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)}


def test_promtool_accepts_the_rules_file() -> None:
    out = prometheus.promtool("check", "rules", str(prometheus.RULES))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    out = prometheus.promtool("test", "rules", str(prometheus.RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_promtool_test_that_fires_it() -> None:
    tests = yaml.safe_load(prometheus.RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert {a["alert"] for a in _alerts()} - fired == set()


def test_the_chart_ships_the_plain_rules_file_and_the_boards() -> None:
    assert prometheus.RULES.resolve().is_relative_to(CHART.resolve()), "helm only packages files inside the chart"
    assert prometheus.RULES.resolve() == (CHART / "files/prometheus/pacer-rules.yml").resolve()
    assert '.Files.Get "files/prometheus/pacer-rules.yml"' in (CHART / "templates/prometheusrule.yaml").read_text()
    assert '.Files.Glob "files/grafana/*.json"' in (CHART / "templates/grafana-dashboards.yaml").read_text()
    assert prometheus.DASHBOARDS.resolve() == (CHART / "files/grafana").resolve()
    assert "{{" not in prometheus.RULES.read_text().replace("{{ $", "").replace("{{$", ""), "no Helm templating"


def test_every_runbook_link_names_an_existing_section() -> None:
    anchors = _anchors(RUNBOOK)
    for alert in _alerts():
        url = alert["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/runbook.md" and anchor in anchors, f"{alert['alert']}: {url}"
        assert anchor == _slug(alert["alert"]), f"{alert['alert']} links to another alert's section"


def test_every_alert_names_a_board_and_the_runbook_maps_it_there() -> None:
    uids = {b.uid for b in boards.BOARDS}
    table = dict(re.findall(r"^\| \[`?(Pacer\w+)`?\]\(#\w+\) \| `(pacer-[\w-]+)`", RUNBOOK.read_text(), re.MULTILINE))
    for alert in _alerts():
        board = alert["annotations"]["dashboard"]
        assert board in uids, f"{alert['alert']}: no board {board}"
        assert table.get(alert["alert"]) == board, f"docs/runbook.md#boards does not map {alert['alert']} to {board}"


def test_committed_dashboards_are_what_the_board_definitions_render() -> None:
    committed = {p.name: p.read_text() for p in prometheus.DASHBOARDS.glob("*.json")}
    assert committed == boards.rendered(), "run `python -m pacer_dev.boards` and commit deploy/grafana/"
    for text in committed.values():
        board = json.loads(text)
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)) and board["uid"]


def test_board_4_shows_the_items_the_senders_shed() -> None:
    """Board 4 is what Pacer decided not to send: items shed for a backlog too deep are among them."""
    dedupe = [expr for uid, _, expr in boards.queries() if uid == "pacer-dedupe"]
    assert any("pacer_sender_shed_items_total" in expr for expr in dedupe), dedupe


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool checks PromQL in rules files: each query becomes a recording rule.
    rules = {"groups": [{"name": "panels", "rules": [
        {"record": f"pacer_panel:check_{i}", "expr": expr} for i, (_, _, expr) in enumerate(boards.queries())]}]}
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(rules))
    out = prometheus.promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_target_down_is_found_by_the_charts_label_whatever_its_job_is_named(tmp_path: Path) -> None:
    """fullnameOverride and nameOverride name the Services, and so the jobs, freely: the
    chart's targets are known by the part-of label its ServiceMonitor copies; another
    application's target down is not Pacer's."""
    down = {"job": "notify-sender", "instance": "s:9102", "app_kubernetes_io_part_of": "pacer"}
    case = {"rule_files": [str(prometheus.RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'up{job="notify-sender",instance="s:9102",app_kubernetes_io_part_of="pacer"}', "values": "0x10"},
            {"series": 'up{job="notify-planner",instance="p:9101",app_kubernetes_io_part_of="pacer"}', "values": "1x10"},
            {"series": 'up{job="billing-api",instance="b:8080",app_kubernetes_io_part_of="billing"}', "values": "0x10"},
        ],
        "alert_rule_test": [{"eval_time": "6m", "alertname": "PacerTargetDown", "exp_alerts": [{
            "exp_labels": {"severity": "warning", **down},
            "exp_annotations": {
                "summary": "Pacer target notify-sender s:9102 cannot be scraped",
                "description": "Prometheus has failed to scrape /metrics of s:9102 for 5 minutes.",
                "runbook_url": "docs/runbook.md#pacertargetdown", "dashboard": "pacer-services"},
        }]}],
    }]}
    path = tmp_path / "target-down.test.yml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    out = prometheus.promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("code,expected", [(40001, "40001"), (None, "none"), (777, "other")])
def test_failure_codes_fold_to_the_code_table(code: int | None, expected: str) -> None:
    from pacer_common.domain.failures import DEFAULT_CODE_TABLE, code_label

    assert code_label(code, DEFAULT_CODE_TABLE) == expected
