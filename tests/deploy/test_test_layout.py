"""Shared test code lives in helper modules (``helpers.py``, ``fakes.py``, ``dispatching.py``,
conftests), never in a test module another one imports."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# A test module named by its path, absolute or relative (``tests.unit.test_x``, ``.test_x``,
# ``..unit.test_x``), or imported by name from its package (``from . import test_x``,
# ``from tests.unit import test_x``).
FROM_A_TEST_MODULE = re.compile(
    r"^[ \t]*(?:(?:from|import)[ \t]+(?:tests\.|\.+)(?:\w+\.)*test_\w+"
    r"|from[ \t]+(?:tests(?:\.\w+)*|\.+(?:\w+(?:\.\w+)*)?)[ \t]+import[ \t]+\(?\s*(?:\w+(?:[ \t]+as[ \t]+\w+)?[ \t]*,\s*)*test_\w+)",
    re.MULTILINE)
PRIVATE_NAME = re.compile(r"^\s*from\s+tests(?:\.\w+)+\s+import\s+[^\n]*\b_\w+", re.MULTILINE)


def offenders(pattern: re.Pattern[str]) -> list[str]:
    return [f"{p.relative_to(TESTS)}: {m.group(0).strip()}"
            for p in sorted(TESTS.rglob("*.py")) for m in pattern.finditer(p.read_text())]


def test_no_test_module_imports_another_test_module() -> None:
    assert offenders(FROM_A_TEST_MODULE) == []


def test_no_test_imports_a_private_helper() -> None:
    assert offenders(PRIVATE_NAME) == []


def test_the_checks_see_an_offending_import() -> None:
    for offending in ("from tests.integration.test_sender_queue import run\n",
                      "import tests.unit.test_queue\n",
                      "from .test_reconciler_bad_events import Log, Publisher\n",
                      "from ..unit.test_queue import ring\n",
                      "from . import test_queue\n",
                      "from ..unit import fakes as f, test_queue\n",
                      "from tests.unit import (\n    test_queue,\n)\n"):
        assert FROM_A_TEST_MODULE.search(offending), offending
    for allowed in ("from .fakes import FakeGateway\n", "from ..integration.helpers import read_topic\n",
                    "from tests.unit.reconciler_fakes import Log, Publisher\n", "from . import fakes\n"):
        assert not FROM_A_TEST_MODULE.search(allowed), allowed
    assert PRIVATE_NAME.search("from tests.conftest import TEMPLATE, _with_db\n")
