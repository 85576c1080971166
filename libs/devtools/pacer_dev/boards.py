"""Pacer's Grafana dashboards as code: one per board (docs/runbook.md#boards).

``python -m pacer_dev.boards`` writes them to ``deploy/grafana/<uid>.json`` (the chart ships
them as a ConfigMap for Grafana's dashboard sidecar); a test keeps the committed files equal
to what this module renders, and the end-to-end test runs every panel's query against a real
Prometheus scraping a running stack.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[3] / "deploy" / "grafana"
DS = {"type": "prometheus", "uid": "${datasource}"}
# Every board has a namespace picker and, next to it, a release picker (a Pacer installation is
# a Helm release in a namespace, as the alert rules count them; the chart's ServiceMonitor puts
# the release in `app_kubernetes_io_instance`): each series a panel reads is matched to both.
# "All" is any value, a series without the label (a plain Prometheus) included.
ALL_NAMESPACES = ".*"
ALL_RELEASES = ".*"
RELEASE_LABEL = "app_kubernetes_io_instance"
NAMESPACE = {"name": "namespace", "type": "query", "label": "Namespace", "datasource": DS,
             "query": {"query": "label_values(pacer_build_info, namespace)", "refId": "namespaces"},
             "includeAll": True, "allValue": ALL_NAMESPACES, "multi": False, "refresh": 2, "sort": 1, "hide": 0,
             "current": {"selected": True, "text": "All", "value": "$__all"}}
RELEASE = {"name": "release", "type": "query", "label": "Release", "datasource": DS,
           "query": {"query": f'label_values(pacer_build_info{{namespace=~"$namespace"}}, {RELEASE_LABEL})',
                     "refId": "releases"},
           "includeAll": True, "allValue": ALL_RELEASES, "multi": False, "refresh": 2, "sort": 1, "hide": 0,
           "current": {"selected": True, "text": "All", "value": "$__all"}}
_SERIES = re.compile(r"\b(pacer_[a-z0-9_]+|process_[a-z0-9_]+|up)\b(\{)?")


def scoped(expr: str) -> str:
    """``expr`` with every series it reads matched to the board's namespace and release pickers."""
    return _SERIES.sub(lambda m: f'{m[1]}{{namespace=~"$namespace", {RELEASE_LABEL}=~"$release"'
                       + (", " if m[2] else "}"), expr)


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | table | bargauge
    description: str = ""
    width: int = 12


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    notes: str = ""  # a text panel on top
    tags: tuple[str, ...] = field(default=("pacer",))


def p(title: str, expr: str, legend: str = "", unit: str = "short", kind: str = "timeseries",
      description: str = "", width: int = 12) -> Panel:
    return Panel(title, ((expr, legend),), unit, kind, description, width)


def q95(metric: str, by: str, window: str = "5m") -> str:
    return f"histogram_quantile(0.95, sum by (le, {by}) (rate({metric}_bucket[{window}])))"


def avg_of(metric: str, by: str, window: str = "5m") -> str:
    return f"sum by ({by}) (rate({metric}_sum[{window}])) / sum by ({by}) (rate({metric}_count[{window}]))"


ITEMS = "pacer_sender_items_total"
WAIT = "pacer_sender_item_wait_seconds"
E2E = "pacer_sender_item_end_to_end_seconds"
GATEWAY = "pacer_gateway_request_duration_seconds"
LEADER = f"on (namespace, {RELEASE_LABEL}, job, instance) pacer_reconciler_leader == 1"

BOARDS: tuple[Board, ...] = (
    Board("pacer-guid", "Pacer · per-guid backlog and wait",
          "Board 1: how much each account has queued and how long its items wait.", (
              p("Guids with the largest backlog (top N)",
                f"max by (rank, guid) (pacer_reconciler_guid_backlog_top and {LEADER})",
                "{{rank}} {{guid}}", kind="table",
                description="Top-N guids by queued items, from the reconciler leader (a small bounded set; "
                            "per-guid detail: GET /api/v1/guids/{guid} and GET /api/v1/backlog)."),
              p("Guids with the oldest waiting item (top N)",
                f"max by (rank, guid) (pacer_reconciler_guid_wait_top_seconds and {LEADER})", "{{rank}} {{guid}}",
                "s", kind="table"),
              p("Wait before claim, p95 by lane", q95(WAIT, "lane"), "{{lane}}", "s"),
              p("Average wait before claim, by lane and kind", avg_of(WAIT, "lane, kind"), "{{lane}} {{kind}}", "s"),
              p("Items of open jobs waiting to be sent", 'sum by (status) (pacer_reconciler_open_job_items'
                f'{{status=~"pending|waiting_retry|claimed|submitted"}} and {LEADER})', "{{status}}"),
              p("Items held in senders' windows", "sum by (instance) (pacer_sender_buffered_items)", "{{instance}}"),
              p("Guids with work in hand, per sender", "sum by (instance) (pacer_sender_active_guids)",
                "{{instance}}"),
              p("Claims per second, by lane", f"sum by (lane) (rate({WAIT}_count[5m]))", "{{lane}}", "ops"),
              p("Send delay after the pacing gap, p95 by lane", q95("pacer_sender_send_delay_seconds", "lane"),
                "{{lane}}", "s", description="From a send being allowed to its gateway call: every second of it "
                "lengthens a paced guid's gap. Claims ahead of the gap's end (PACER_SENDER_CLAIM_AHEAD_MS) keep it "
                "to milliseconds; a rise means a busy sender (see its event loop lag)."),
          ),
          notes="One guid in detail: `GET /api/v1/guids/GUID` (Control API) — its lease, pause, limits and "
                "queue. Metrics never carry a label per guid; the top-N tables are the only guid labels."),
    Board("pacer-sends", "Pacer · success rate and failure codes",
          "Board 2: did sends succeed, and if not, what did the gateway say.", (
              p("Success rate (confirmed / finished)", f'sum(rate({ITEMS}{{outcome="confirmed"}}[5m])) / '
                f'sum(rate({ITEMS}{{outcome=~"confirmed|failed"}}[5m]))', "success", "percentunit", "stat", width=6),
              p("Confirmed sends per second", f'sum(rate({ITEMS}{{outcome="confirmed"}}[5m]))', "confirmed",
                "ops", "stat", width=6),
              p("Outcomes", f"sum by (outcome) (rate({ITEMS}[5m]))", "{{outcome}}", "ops"),
              p("Failures by gateway code (last hour)",
                "sum by (code, failure_class) (increase(pacer_sender_send_failures_total[1h]))",
                "{{code}} {{failure_class}}", kind="bargauge",
                description="Codes outside the configured code table are 'other'; 'none': no code (HTTP status, "
                            "timeout, connection)."),
              p("Gateway call time, p95", q95(GATEWAY, "operation"), "{{operation}}", "s"),
              p("Gateway answers by result", f"sum by (operation, result) (rate({GATEWAY}_count[5m]))",
                "{{operation}} {{result}}", "ops"),
              p("Planned → gateway confirmed, p95 by kind", q95(E2E, "kind"), "{{kind}}", "s"),
              p("In-doubt sends resolved (last hour)",
                "sum by (result) (increase(pacer_reconciler_verifications_total[1h]))", "{{result}}",
                kind="bargauge"),
              p("Guids slowed by rate limits", f"max(pacer_reconciler_guids_slowed and {LEADER})", "slowed",
                description="Guids paced at a rate-limit penalty: the gateway rate-limited them lately (or left a "
                            "send unanswered). Each clean send brings a guid back toward its own pace; the Guids "
                            "page shows each as slowed ×N."),
              Panel("Guids keeping the gateway's quiet, and their in-doubt sends",
                    ((f"max(pacer_reconciler_guids_quiet and {LEADER})", "guids"),
                     (f"max(pacer_reconciler_in_doubt_quiet_items and {LEADER})", "in-doubt sends")),
                    "short", "timeseries",
                    "Guids the gateway asked for quiet (a rate limit's Retry-After): nothing is sent to them and "
                    "no in-doubt send of theirs is looked up until it ends. The Guids page shows when each ends.",
                    12),
              p("Tenants' daily quota used",
                f"max by (namespace, {RELEASE_LABEL}, tenant) (pacer_reconciler_tenant_sends_today and {LEADER}) "
                f"/ on (namespace, {RELEASE_LABEL}, tenant) "
                f"max by (namespace, {RELEASE_LABEL}, tenant) (pacer_reconciler_tenant_sends_per_day and {LEADER})",
                "{{tenant}} {{namespace}} {{app_kubernetes_io_instance}}",
                "percentunit", "bargauge",
                description="Sends of each tenant's today (its calendar day in its time zone) against its "
                            "sends_per_day; at 100% its sends wait for its midnight."),
          )),
    Board("pacer-kinds", "Pacer · share by kind",
          "Board 3: are auto-replies and takeover prompts squeezed by campaigns?", (
              p("Confirmed sends by kind", f'sum by (kind) (rate({ITEMS}{{outcome="confirmed"}}[5m]))', "{{kind}}",
                "ops"),
              p("Share of confirmed sends by kind (last hour)",
                f'sum by (kind) (increase({ITEMS}{{outcome="confirmed"}}[1h])) / ignoring (kind) group_left '
                f'sum(increase({ITEMS}{{outcome="confirmed"}}[1h]))', "{{kind}}", "percentunit", "bargauge"),
              p("Sends by lane", f"sum by (lane) (rate({ITEMS}[5m]))", "{{lane}}", "ops"),
              p("Wait before claim, p95 by kind", q95(WAIT, "kind"), "{{kind}}", "s"),
              p("Planned → confirmed, average by kind", avg_of(E2E, "kind"), "{{kind}}", "s"),
              p("Job requests by outcome", "sum by (outcome) (rate(pacer_planner_requests_total[5m]))",
                "{{outcome}}", "ops"),
          )),
    Board("pacer-dedupe", "Pacer · dedupe hits, expired and shed",
          "Board 4: what Pacer decided not to send, and why.", (
              p("Duplicate job requests (last hour)",
                'sum(increase(pacer_planner_requests_total{outcome="duplicate"}[1h]))', "duplicate requests",
                kind="stat", width=6),
              p("Sends intercepted by the idempotency ledger (last hour)",
                f'sum(increase({ITEMS}{{outcome="duplicate"}}[1h]))', "intercepted", kind="stat", width=6),
              p("Duplicate intercepts in the events kept",
                f"max(pacer_reconciler_duplicate_intercepts_kept and {LEADER})", "in the events kept", kind="stat",
                width=6),
              p("Dead-lettered job requests (last hour)",
                'sum(increase(pacer_planner_requests_total{outcome="dead_lettered"}[1h]))', "dead-lettered",
                kind="stat", width=6),
              p("Dead-lettered callbacks (last hour)",
                'sum(increase(pacer_intake_callbacks_total{result="dead_lettered"}[1h]))', "dead-lettered",
                kind="stat", width=6),
              p("Expired before sending, by kind", f'sum by (kind) (increase({ITEMS}{{outcome="expired"}}[1h]))',
                "{{kind}}"),
              p("Expired while held, by the reconciler (last hour)",
                'sum(increase(pacer_reconciler_sweep_items_total{sweep="expire_due"}[1h]))', "expired while held",
                description="Items past their expire_at that no sender reached (a held guid, a paused job or shard, "
                            "a job awaiting approval), expired by the reconciler's expire_due sweep. Those a sender "
                            "expires are in the panel by kind."),
              p("Shed by the senders (last hour)", "sum(increase(pacer_sender_shed_items_total[1h]))", "shed",
                description="Batch items a sender expired early (error class shed): at their guid's current rate "
                            "they could not go out before their expire_at. A rise is a backlog that will not drain "
                            "in time: see the guid's backlog (board pacer-guid)."),
              p("Expired and abandoned items of open jobs", 'sum by (status) (pacer_reconciler_open_job_items'
                f'{{status=~"expired|abandoned"}} and {LEADER})', "{{status}}"),
              p("Not sent: deferred or put back", f'sum by (outcome) (rate({ITEMS}{{outcome=~"rate_limited|'
                f'deferred|deadline_missed|expiring|guid_lost|held|not_pending|yielded"}}[5m]))', "{{outcome}}", "ops"),
          )),
    Board("pacer-locks", "Pacer · locks",
          "The lock board: who holds what, what expired, what was taken over or refused.", (
              p("Running items (claimed or submitted)", f"max(pacer_reconciler_running_items and {LEADER})",
                "running", kind="stat", width=6),
              p("Expired leases", f"max(pacer_reconciler_expired_leases and {LEADER})", "expired", kind="stat",
                width=6),
              p("Guid lease takeovers (last hour)", f"max(increase(pacer_reconciler_guid_takeovers_total[1h]) "
                f"and {LEADER})", "takeovers", kind="stat", width=6),
              p("Manual retry conflicts, all time", f"max(pacer_reconciler_retry_conflicts_total and {LEADER})",
                "conflicts", kind="stat", width=6),
              p("Takeovers per sender", "sum by (instance) (rate(pacer_sender_guid_takeovers_total[5m]))",
                "{{instance}}", "ops"),
              p("Guid leases held per sender", "sum by (instance) (pacer_sender_guid_leases_held)", "{{instance}}"),
              p("Command partitions per sender (0: idle, more senders than partitions)",
                "sum by (instance) (pacer_sender_partitions_assigned)", "{{instance}}"),
              p("Expired leases swept", "sum by (sweep) (rate(pacer_reconciler_sweep_items_total"
                '{sweep=~"claim_expired|submit_expired"}[5m]))', "{{sweep}}", "ops"),
              p("Fenced and duplicate outcomes", f'sum by (outcome) (rate({ITEMS}{{outcome=~"fenced|duplicate"}}'
                "[5m]))", "{{outcome}}", "ops"),
              p("Forced releases, all time", f"max(pacer_reconciler_forced_releases_total and {LEADER})",
                "guid leases"),
              p("Duplicate intercepts in the events kept",
                f"max(pacer_reconciler_duplicate_intercepts_kept and {LEADER})", "intercepts",
                description="Counted over the item events retention keeps: it falls when a partition is dropped."),
          )),
    Board("pacer-jobs", "Pacer · job progress and stalled shards",
          "Progress of open jobs, stalled shards, and what paused them.", (
              p("Jobs running", f"max(pacer_reconciler_jobs_running and {LEADER})", "running", kind="stat", width=6),
              p("Stalled shards", f"max(pacer_reconciler_stalled_shards and {LEADER})", "stalled", kind="stat",
                width=6),
              p("Paused guids", f"max(pacer_reconciler_guids_paused and {LEADER})", "paused", kind="stat", width=6),
              p("Open jobs done", '(sum(pacer_reconciler_open_job_items{status=~"confirmed|failed|expired|abandoned|'
                f'unverified"}} and {LEADER}) or vector(0)) / sum(pacer_reconciler_open_job_items and {LEADER})',
                "done", "percentunit", "stat", width=6),
              p("Open jobs with the most items left: share done (top N)",
                f"max by (rank, job_id, kind, tenant, status) (pacer_reconciler_job_done_ratio_top and {LEADER})",
                "{{rank}}. {{job_id}} · {{kind}} · {{tenant}} · {{status}}", "percentunit", "bargauge",
                description="Items in a final status (confirmed, failed, expired, abandoned, unverified) of each of "
                            "the N open jobs with the most items left (PACER_RECONCILER_BACKLOG_TOP_N), from the "
                            "reconciler leader. A requery job counts the pages fetched so far. Every job's counts: "
                            "GET /api/v1/jobs/{job_id}, or the console's Jobs page."),
              p("Open jobs with the most items left (top N)",
                f"max by (rank, job_id, kind, tenant, status) (pacer_reconciler_job_items_left_top and {LEADER})",
                "", kind="table"),
              p("Items of open jobs by status", f"sum by (status) (pacer_reconciler_open_job_items and {LEADER})",
                "{{status}}"),
              p("Paused jobs by reason", f"max by (reason) (pacer_reconciler_jobs_paused and {LEADER})",
                "{{reason}}"),
              p("Guids by lifecycle state (any but online is held)",
                f"max by (state) (pacer_reconciler_guids_by_state and {LEADER})", "{{state}}"),
              p("Callbacks consumed", "sum by (cmd, result) (rate(pacer_reconciler_callbacks_total[5m]))",
                "{{cmd}} {{result}}", "ops"),
              p("Breaker trips", "sum by (scope) (increase(pacer_reconciler_breaker_trips_total[15m]))", "{{scope}}"),
              p("Events projected per second", "sum(rate(pacer_reconciler_events_total[5m]))", "events", "ops"),
              p("Tail lag per reconciler", "max by (instance) (pacer_reconciler_tail_lag_seconds)", "{{instance}}", "s"),
              p("Items moved by sweeps", "sum by (sweep) (rate(pacer_reconciler_sweep_items_total[5m]))",
                "{{sweep}}", "ops"),
              p("Events held back by a transaction open on the server",
                f"max(pacer_reconciler_events_held_back_seconds and {LEADER})", "oldest event's wait", "s"),
              Panel("Time partitions kept past retention; default partitions holding rows (1)", (
                  ("max by (table) (pacer_reconciler_partitions_kept)", "kept: {{table}}"),
                  ("max by (table) (pacer_reconciler_default_partition_rows)", "default: {{table}}"))),
              p("Maintenance settings per reconciler (days; every replica should show the same)",
                "max by (table, setting, instance) (pacer_reconciler_maintenance_days)",
                "{{table}} {{setting}} {{instance}}", kind="table"),
          )),
    Board("pacer-services", "Pacer · services",
          "The processes: up, build, consumer lag, callbacks, Postgres pools, CPU, memory, GC, the Control API, the reconciler leader.", (
              p("Targets up", 'up{app_kubernetes_io_part_of="pacer"} or up{job=~".*pacer.*"}', "{{job}} {{instance}}",
                kind="stat"),
              p("Builds running", "count by (service, version, python) (pacer_build_info)",
                "{{service}} {{version}} (Python {{python}})", kind="table"),
              p("Consumer lag per partition", "max by (topic, partition) (pacer_kafka_consumer_lag)",
                "{{topic}}[{{partition}}]"),
              p("Kafka records deleted before their group read them (offset resets, last hour)",
                "sum by (topic) (increase(pacer_kafka_offset_resets_total[1h]))", "{{topic}}"),
              p("Callbacks by tenant and result", "sum by (tenant, result) (rate(pacer_intake_callbacks_total[5m]))",
                "{{tenant}} {{result}}", "ops"),
              p("Reconciler leader", "max by (instance) (pacer_reconciler_leader)", "{{instance}}"),
              p("Reconciler segments held", "max by (instance) (pacer_reconciler_segments_owned)", "{{instance}}"),
              p("CPU per process", "rate(process_cpu_seconds_total[1m])", "{{job}} {{instance}}", "percentunit"),
              p("Postgres pool in use, share of its maximum",
                "max by (pool, instance) (pacer_db_pool_connections{state=\"in_use\"} "
                "/ ignoring (state) pacer_db_pool_max_connections)", "{{pool}} {{instance}}",
                "percentunit"),
              p("Postgres pool: mean wait for a connection",
                "sum by (pool) (rate(pacer_db_pool_wait_seconds_total[5m])) "
                "/ sum by (pool) (rate(pacer_db_pool_requests_total[5m]))", "{{pool}}", "s"),
              p("Postgres connections discarded (interrupted or broken)",
                "sum by (pool) (increase(pacer_db_pool_connections_discarded_total[15m]))", "{{pool}}"),
              p("Postgres errors run again, by kind (deadlock: rows taken in opposite orders)",
                "sum by (job, error) (increase(pacer_db_transient_errors_total[15m]))", "{{job}} {{error}}"),
              p("Resident memory per process", "process_resident_memory_bytes", "{{job}} {{instance}}", "bytes"),
              p("Share of time in garbage collection",
                "sum by (job, instance) (rate(pacer_gc_pause_seconds_total[5m]))", "{{job}} {{instance}}",
                "percentunit"),
              p("Control API requests by status", "sum by (status) (rate(pacer_control_requests_total[5m]))",
                "{{status}}", "reqps"),
              p("Control API 5xx by route",
                'sum by (route) (increase(pacer_control_requests_total{status=~"5.."}[10m]))', "{{route}}"),
              p("Control API request time, p95", q95("pacer_control_request_seconds", "route"), "{{route}}", "s"),
              Panel("Planner: environment faults and internal errors", (
                  ("sum(rate(pacer_planner_environment_faults_total[5m]))", "environment"),
                  ("sum(rate(pacer_planner_internal_errors_total[5m]))", "internal"),
              ), "ops"),
              p("Planner: requery pages fetched but not stored (another planner had the job)",
                "sum by (instance) (increase(pacer_planner_target_pages_lost_total[1h]))", "{{instance}}"),
              Panel("Sender: unreadable commands and internal errors", (
                  ("sum(rate(pacer_sender_bad_commands_total[5m]))", "unreadable commands"),
                  ("sum(rate(pacer_sender_internal_errors_total[5m]))", "internal errors"),
              ), "ops"),
          )),
)


def _panel(n: int, panel: Panel, x: int, y: int) -> dict[str, Any]:
    height = 8 if panel.kind != "stat" else 5
    out: dict[str, Any] = {
        "id": n, "type": panel.kind, "title": panel.title, "datasource": DS,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, **({"min": 0, "max": 1} if panel.unit == "percentunit" else {})},
                        "overrides": []},
        # Tables and bar gauges show now: a range would keep every series seen in it (a top-N's past ranks).
        "targets": [{"datasource": DS, "expr": scoped(expr), "legendFormat": legend, "refId": chr(ord("A") + i),
                     **({"instant": True, "format": "table"} if panel.kind == "table" else
                        {"instant": True} if panel.kind == "bargauge" else {})}
                    for i, (expr, legend) in enumerate(panel.exprs)],
    }
    if panel.description:
        out["description"] = panel.description
    return out


def render(board: Board) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    x = y = 0
    row_h = 0
    if board.notes:
        panels.append({"id": 1, "type": "text", "title": "", "gridPos": {"h": 3, "w": 24, "x": 0, "y": 0},
                       "options": {"mode": "markdown", "content": board.notes}})
        y = 3
    for panel in board.panels:
        if x + panel.width > 24:
            x, y, row_h = 0, y + row_h, 0
        panels.append(_panel(len(panels) + 1, panel, x, y))
        x += panel.width
        row_h = max(row_h, panels[-1]["gridPos"]["h"])
    return {
        "uid": board.uid, "title": board.title, "description": board.description, "tags": list(board.tags),
        "editable": True, "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus", "current": {}, "hide": 0}, NAMESPACE, RELEASE]},
        "annotations": {"list": []},
        "links": [{"title": "Pacer boards", "type": "dashboards", "tags": ["pacer"], "asDropdown": True}],
        "panels": panels,
    }


def rendered() -> dict[str, str]:
    """File name → JSON text, as committed under deploy/grafana/."""
    return {f"{b.uid}.json": json.dumps(render(b), indent=2, ensure_ascii=False) + "\n" for b in BOARDS}


def queries() -> list[tuple[str, str, str]]:
    """(board uid, panel title, PromQL) of every panel, as Grafana sends it with "All"
    namespaces and releases picked."""
    return [(b.uid, pn.title, scoped(expr).replace("$namespace", ALL_NAMESPACES).replace("$release", ALL_RELEASES))
            for b in BOARDS for pn in b.panels for expr, _ in pn.exprs]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
