"""The board preview draws every panel of a committed board from what Prometheus answers."""

from __future__ import annotations

import json
from typing import Any

from pacer_dev.board_preview import BOARDS, render


class FakePrometheus:
    """Answers every instant query with two ranked guids and every range query with one series."""

    def __init__(self) -> None:
        self.instant_queries: list[str] = []
        self.range_queries: list[str] = []

    def instant(self, expr: str) -> list[dict[str, Any]]:
        self.instant_queries.append(expr)
        return [{"metric": {"rank": "1", "guid": "g-big"}, "value": [0, "1200"]},
                {"metric": {"rank": "2", "guid": "g-small"}, "value": [0, "7"]}]

    def range(self, expr: str, minutes: int) -> list[dict[str, Any]]:
        self.range_queries.append(expr)
        return [{"metric": {"lane": "batch"}, "values": [[0, "1"], [60, "3"], [120, "2"]]}]


def test_every_panel_of_the_per_guid_board_is_queried_and_drawn() -> None:
    board = json.loads((BOARDS / "pacer-guid.json").read_text())
    prom = FakePrometheus()
    page = render(board, prom, minutes=15)
    panels = [p for p in board["panels"] if p["type"] != "text"]
    for panel in panels:
        assert panel["title"].replace("'", "&#x27;") in page
    assert len(prom.instant_queries) + len(prom.range_queries) == sum(len(p["targets"]) for p in panels)
    assert "1 g-big" in page and "1,200" in page  # a top-N table row, legend from {{rank}} {{guid}}
    assert page.count("<polyline") == len(prom.range_queries)
    assert "http" not in page.split("<body>")[1]  # nothing fetched from elsewhere
