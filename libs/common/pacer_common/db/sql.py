"""SQL lives in ``.sql`` files next to this module; this loads them by name."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def query(name: str) -> str:
    """The text of ``db/queries/<name>.sql``."""
    return resources.files("pacer_common.db.queries").joinpath(f"{name}.sql").read_text()


def migrations() -> list[tuple[int, str, str]]:
    """``(number, name, sql)`` for every numbered migration, in order."""
    found = []
    for entry in resources.files("pacer_common.db.migrations").iterdir():
        if entry.name.endswith(".sql") and entry.name[:4].isdigit():
            found.append((int(entry.name[:4]), entry.name, entry.read_text()))
    return sorted(found)
