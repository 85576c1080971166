"""Today's schema in one place: migrations change tables, each stored function and trigger
has one file under ``db/schema/``, and those files can be re-created in the order given."""

from __future__ import annotations

import re

import pytest

from pacer_common.db.migrate import LAST_MIGRATION_WITH_FUNCTIONS, MOVE_TO_SCHEMA, defined_routines
from pacer_common.db.sql import migrations, schema_objects

FUNCTIONS = {path.removeprefix("functions/").removesuffix(".sql"): sql
             for path, sql in schema_objects() if path.startswith("functions/")}
TRIGGERS = {path.removeprefix("triggers/").removesuffix(".sql"): sql
            for path, sql in schema_objects() if path.startswith("triggers/")}


def test_no_migration_after_the_last_historical_one_defines_a_function_or_trigger() -> None:
    offenders = [f"{name}: {', '.join(found)}" for number, name, sql in migrations()
                 if number > LAST_MIGRATION_WITH_FUNCTIONS and (found := defined_routines(sql))]
    assert not offenders, MOVE_TO_SCHEMA.format(last=LAST_MIGRATION_WITH_FUNCTIONS) + "\n" + "\n".join(offenders)


@pytest.mark.parametrize(("sql", "found"), [
    ("CREATE FUNCTION pacer_x() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;", ["function pacer_x"]),
    ("create or replace function public.pacer_y(a int)", ["function public.pacer_y"]),
    ("CREATE OR REPLACE TRIGGER t_x BEFORE UPDATE ON jobs", ["trigger t_x"]),
    ("CREATE CONSTRAINT TRIGGER t_y AFTER INSERT ON jobs", ["trigger t_y"]),
    ("CREATE PROCEDURE pacer_p()", ["procedure pacer_p"]),
    ("DO $$ BEGIN EXECUTE 'x'; END $$; CREATE\n  FUNCTION pacer_z()", ["function pacer_z"]),
    ("-- CREATE FUNCTION pacer_old() was here\nALTER TABLE items ADD COLUMN x int;", []),
    ("/* CREATE TRIGGER t */ CREATE INDEX items_x ON items (x);", []),
    ("DROP FUNCTION IF EXISTS pacer_gone(uuid);", []),
])
def test_the_migration_guard_sees_functions_and_triggers_and_nothing_else(sql: str, found: list[str]) -> None:
    assert defined_routines(sql) == found


def test_the_historical_migrations_are_where_the_guard_starts() -> None:
    """The guard's boundary is the last migration that defines a function: moving it later
    would let a new migration define one unnoticed."""
    last = max(number for number, _, sql in migrations() if defined_routines(sql))
    assert last == LAST_MIGRATION_WITH_FUNCTIONS


def test_each_function_file_defines_the_function_it_is_named_after_and_nothing_else() -> None:
    assert FUNCTIONS, "no function file under db/schema/functions/"
    for name, sql in FUNCTIONS.items():
        assert defined_routines(sql) == [f"function {name}"], name
        assert re.search(rf"\bCREATE OR REPLACE FUNCTION {name}\(", sql), f"{name}: CREATE OR REPLACE, so it re-applies"


def test_each_trigger_file_defines_the_trigger_it_is_named_after_with_a_function_that_has_a_file() -> None:
    assert TRIGGERS, "no trigger file under db/schema/triggers/"
    for name, sql in TRIGGERS.items():
        assert defined_routines(sql) == [f"trigger {name}"], name
        assert re.search(rf"\bCREATE OR REPLACE TRIGGER {name}\b", sql), f"{name}: CREATE OR REPLACE, so it re-applies"
        (function,) = re.findall(r"EXECUTE FUNCTION (\w+)\(", sql)
        assert function in FUNCTIONS, f"trigger {name} runs {function}, which has no file"


def test_sql_language_functions_come_after_the_functions_their_bodies_call() -> None:
    """A LANGUAGE sql body is checked when it is created, against the functions that exist
    then: those must have been re-created already (plpgsql bodies are resolved at run time)."""
    order = list(FUNCTIONS)
    assert order == sorted(order)
    for name, sql in FUNCTIONS.items():
        if not re.search(r"\bLANGUAGE\s+sql\b", sql, re.IGNORECASE):
            continue
        body = sql.split("$fn$")[1]
        for called in set(re.findall(r"\b(pacer_\w+)\s*\(", body)) & set(FUNCTIONS):
            assert order.index(called) < order.index(name), f"{name} calls {called}: its file must sort after"
