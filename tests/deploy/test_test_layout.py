"""Shared test code lives in helper modules (``helpers.py``, ``fakes.py``, ``dispatching.py``,
conftests), never in a test module another one imports."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FROM_A_TEST_MODULE = re.compile(r"^\s*(?:from|import)\s+tests(?:\.\w+)*\.test_\w+", re.MULTILINE)
PRIVATE_NAME = re.compile(r"^\s*from\s+tests(?:\.\w+)+\s+import\s+[^\n]*\b_\w+", re.MULTILINE)


def offenders(pattern: re.Pattern[str]) -> list[str]:
    return [f"{p.relative_to(TESTS)}: {m.group(0).strip()}"
            for p in sorted(TESTS.rglob("*.py")) for m in pattern.finditer(p.read_text())]


def test_no_test_module_imports_another_test_module() -> None:
    assert offenders(FROM_A_TEST_MODULE) == []


def test_no_test_imports_a_private_helper() -> None:
    assert offenders(PRIVATE_NAME) == []


def test_the_checks_see_an_offending_import() -> None:
    assert FROM_A_TEST_MODULE.search("from tests.integration.test_sender_queue import run\n")
    assert PRIVATE_NAME.search("from tests.conftest import TEMPLATE, _with_db\n")
