"""The delivery report as CSV: one line per item, by item id, shaped a page of items at a time."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pacer_common.domain.ids import RequestId

COLUMNS: tuple[str, ...] = (
    "item_id", "guid", "to_id", "status", "attempts", "last_error_class", "last_error", "updated_at",
)
PAGE_ROWS = 2000  # items read per page of a download (PACER_CONTROL_REPORT_PAGE_ROWS)
# A cell starting with one of these is read as a formula by spreadsheet programs; the report
# is opened in them, and guid, to_id and error texts come from outside.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    text = str(value)
    if text.startswith(_FORMULA_START):
        return "'" + text
    return text


def header() -> str:
    return lines([COLUMNS], raw=True)


def lines(rows: Iterable[Sequence[Any]], raw: bool = False) -> str:
    """CSV text (RFC 4180, CRLF line ends) for ``rows`` given in :data:`COLUMNS` order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        writer.writerow(row if raw else [cell(v) for v in row])
    return out.getvalue()


def filename(request_id: RequestId) -> str:
    """A safe download name derived from the job's request id."""
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in request_id)[:100]
    return f"pacer-report-{safe or 'job'}.csv"
