"""SQL lives in ``.sql`` files next to the code that runs it; this loads them by name.

``db/queries/`` holds the shared statements, ``db/migrations/`` the numbered table changes,
``db/schema/functions/`` and ``db/schema/triggers/`` today's stored functions and triggers
(one per file, named after it), ``db/schema/indexes/`` the indexes built online
(:mod:`pacer_common.db.online_indexes`), and each service's ``adapters/sql/`` its own
statements.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import LiteralString, cast

SCHEMA_PACKAGE = "pacer_common.db.schema"


@cache
def sql_file(package: str, name: str) -> LiteralString:
    """The text of ``<name>.sql`` in the package ``package``.

    Typed ``LiteralString`` as psycopg wants of a query: the text is a file shipped inside the
    package, never built from input, so it is as trusted as a literal in the code.
    """
    return cast(LiteralString, resources.files(package).joinpath(f"{name}.sql").read_text())


def loader(package: str) -> Callable[[str], LiteralString]:
    """``name -> text of <name>.sql`` in ``package``: each adapter's ``_sql``."""
    return lambda name: sql_file(package, name)


query = loader("pacer_common.db.queries")
"""The text of ``db/queries/<name>.sql``."""


def migrations() -> list[tuple[int, str, str]]:
    """``(number, name, sql)`` for every numbered migration, in order."""
    found = []
    for entry in resources.files("pacer_common.db.migrations").iterdir():
        if entry.name.endswith(".sql") and entry.name[:4].isdigit():
            found.append((int(entry.name[:4]), entry.name, entry.read_text()))
    return sorted(found)


def schema_objects() -> list[tuple[str, str]]:
    """``(path, sql)`` of every stored function, then every trigger, each kind by file name.

    The order is the order they are (re)created in: a trigger needs its function, and a
    ``LANGUAGE sql`` body is checked against the functions it calls when it is created, so
    such a function's file must sort after theirs (plpgsql bodies are resolved when they run).
    """
    found = []
    for kind in ("functions", "triggers"):
        entries = [e for e in resources.files(f"{SCHEMA_PACKAGE}.{kind}").iterdir() if e.name.endswith(".sql")]
        found += [(f"{kind}/{e.name}", e.read_text()) for e in sorted(entries, key=lambda e: e.name)]
    return found


def online_indexes() -> list[tuple[str, str]]:
    """``(path, sql)`` of every index built online (``db/schema/indexes/<index>.sql``), by file name."""
    entries = [e for e in resources.files(f"{SCHEMA_PACKAGE}.indexes").iterdir() if e.name.endswith(".sql")]
    return [(f"indexes/{e.name}", e.read_text()) for e in sorted(entries, key=lambda e: e.name)]
