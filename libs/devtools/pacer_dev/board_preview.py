"""``python -m pacer_dev.board_preview``: one board as a static HTML page, from a live Prometheus.

For a look at a board where no Grafana is at hand: every panel of ``deploy/grafana/<uid>.json``
is queried as Grafana would (tables and stats as instant queries, time series as range queries
over the last ``--minutes``) and drawn as plain HTML and SVG, with no asset from elsewhere.

    python -m pacer_dev.board_preview pacer-guid --prometheus "$PACER_PROMETHEUS_URL" -o /tmp/guid.html
"""

from __future__ import annotations

import argparse
import html
import json
import re
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

BOARDS = Path(__file__).resolve().parents[3] / "deploy" / "grafana"
COLOURS = ("#3274d9", "#e0752d", "#56a64b", "#a352cc", "#d44a3a", "#37872d", "#8f3bb8", "#1f60c4")
RANGE_VARS = {"$__rate_interval": "5m", "$__interval": "30s", "$__range": "15m"}


def _expr(expr: str) -> str:
    for var, value in RANGE_VARS.items():
        expr = expr.replace(var, value)
    return expr


def _legend(fmt: str, metric: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt or "") or json.dumps(metric)


def _number(value: float, unit: str | None) -> str:
    if unit == "s":
        return f"{value:.0f} s" if value >= 10 else f"{value:.2f} s"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


class Source(Protocol):
    """What a board is drawn from: Prometheus's instant and range query answers."""

    def instant(self, expr: str) -> list[dict[str, Any]]: ...

    def range(self, expr: str, minutes: int) -> list[dict[str, Any]]: ...


class Prometheus:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=10)

    def instant(self, expr: str) -> list[dict[str, Any]]:
        r = self.http.get("/api/v1/query", params={"query": _expr(expr)})
        r.raise_for_status()
        return list(r.json()["data"]["result"])

    def range(self, expr: str, minutes: int) -> list[dict[str, Any]]:
        end = time.time()
        r = self.http.get("/api/v1/query_range", params={
            "query": _expr(expr), "start": end - minutes * 60, "end": end, "step": max(5, minutes * 60 // 120)})
        r.raise_for_status()
        return list(r.json()["data"]["result"])


def _svg(series: list[tuple[str, list[tuple[float, float]]]], unit: str | None) -> str:
    points = [p for _, pts in series for p in pts]
    if not points:
        return '<p class="empty">no data</p>'
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    top = max(max(p[1] for p in points), 1e-9)
    w, h = 560, 170

    def xy(t: float, v: float) -> str:
        return f"{(t - t0) / max(t1 - t0, 1) * w:.1f},{h - v / top * (h - 22):.1f}"

    lines = "".join(
        f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2" '
        f'points="{" ".join(xy(t, v) for t, v in pts)}"/>' for i, (_, pts) in enumerate(series))
    legend = "".join(f'<span style="color:{COLOURS[i % len(COLOURS)]}">■</span> {html.escape(name)} '
                     for i, (name, _) in enumerate(series))
    return (f'<svg viewBox="0 0 {w} {h}" width="100%" height="{h}"><line x1="0" y1="{h}" x2="{w}" y2="{h}" '
            f'stroke="#ccc"/>{lines}<text x="4" y="12" font-size="11" fill="#666">max {_number(top, unit)}</text>'
            f'</svg><div class="legend">{legend}</div>')


def _table(rows: list[tuple[str, float]], unit: str | None) -> str:
    if not rows:
        return '<p class="empty">no series (nothing queued)</p>'
    body = "".join(f"<tr><td>{html.escape(name)}</td><td class=num>{_number(v, unit)}</td></tr>" for name, v in rows)
    return f"<table>{body}</table>"


def render(board: dict[str, Any], prom: Source, minutes: int) -> str:
    cards = []
    for panel in board["panels"]:
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        title = html.escape(panel.get("title", ""))
        if panel["type"] == "text":
            content = html.escape(panel.get("options", {}).get("content", board.get("description", "")))
            cards.append(f'<div class="card wide"><p>{content}</p></div>')
            continue
        if panel["type"] in ("table", "stat", "gauge"):
            rows = [(_legend(t.get("legendFormat", ""), s["metric"]), float(s["value"][1]))
                    for t in panel.get("targets", []) for s in prom.instant(t["expr"])]
            content = _table(sorted(rows, key=lambda r: r[0]), unit)
        else:
            series = [(_legend(t.get("legendFormat", ""), s["metric"]), [(float(a), float(b)) for a, b in s["values"]])
                      for t in panel.get("targets", []) for s in prom.range(t["expr"], minutes)]
            content = _svg(series, unit)
        cards.append(f'<div class="card"><h2>{title}</h2>{content}</div>')
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(board['title'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 16px; background: #f4f5f5; color: #222; }}
h1 {{ font-size: 20px; margin: 0 0 12px; }} h2 {{ font-size: 14px; margin: 0 0 8px; }}
.grid {{ display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }}
.card {{ background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: 10px 12px; }}
.wide {{ grid-column: 1 / 3; color: #555; font-size: 13px; }}
table {{ border-collapse: collapse; width: 100%; font-size: 13px; }} td {{ border-top: 1px solid #eee; padding: 3px 6px; }}
.num {{ text-align: right; font-variant-numeric: tabular-nums; }} .legend {{ font-size: 12px; color: #444; }}
.empty {{ color: #888; font-size: 13px; }}
</style></head><body><h1>{html.escape(board['title'])} <small style="color:#888;font-weight:normal">
last {minutes} min</small></h1><div class="grid">{''.join(cards)}</div></body></html>"""


def main() -> None:
    p = argparse.ArgumentParser(prog="pacer-board-preview", description=__doc__.splitlines()[0])
    p.add_argument("board", help="a board's uid, e.g. pacer-guid (a file of deploy/grafana/)")
    p.add_argument("--prometheus", required=True, help="the Prometheus base URL")
    p.add_argument("--minutes", type=int, default=15)
    p.add_argument("-o", "--output", type=Path, required=True)
    args = p.parse_args()
    board = json.loads((BOARDS / f"{args.board}.json").read_text())
    args.output.write_text(render(board, Prometheus(args.prometheus), args.minutes))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
