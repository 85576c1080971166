"""A service's startup options (``-c name=value``) come after those its database URL or
``PGOPTIONS`` gives, instead of replacing them: libpq takes one ``options`` parameter."""

from __future__ import annotations

import pytest

from pacer_common.db.pool import new_pool


@pytest.mark.parametrize(("url", "env", "expected"), [
    ("postgresql://u@h/db?options=-c%20search_path%3Dx", None, "-c search_path=x -c pacer.timezone=UTC"),
    ("host=h dbname=db options='-c search_path=x'", None, "-c search_path=x -c pacer.timezone=UTC"),
    ("postgresql://u@h/db", "-c statement_timeout=5s", "-c statement_timeout=5s -c pacer.timezone=UTC"),
    ("postgresql://u@h/db", None, "-c pacer.timezone=UTC"),
], ids=["uri", "key=value", "PGOPTIONS", "none"])
def test_startup_options_are_added_to_those_given(monkeypatch: pytest.MonkeyPatch, url: str, env: str | None,
                                                  expected: str) -> None:
    if env is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", env)
    added, plain = new_pool(url, options="-c pacer.timezone=UTC").kwargs, new_pool(url).kwargs
    assert isinstance(added, dict) and isinstance(plain, dict)
    assert added["options"] == expected
    assert "options" not in plain, "none added: libpq reads the URL's and PGOPTIONS itself"
