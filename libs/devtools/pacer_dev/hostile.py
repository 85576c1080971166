"""Hostile job requests, one builder per kind of trouble, for tests and the chaos suite.

Each builder takes a request id (so the record can be found in the dead-letter topic) and a
free string ``salt`` that generated tests vary; each gives bytes a planner must dead-letter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

INT4_OVER = 2**31


def base(rid: str, salt: str = "", *, kind: str = "campaign", n: int = 1, guid: str = "g-hostile",
         expire_in: timedelta = timedelta(hours=1), **extra: Any) -> dict[str, Any]:
    """A valid request: ``n`` targets of one guid, each with a var. ``salt`` goes in the text."""
    by_kind: dict[str, dict[str, Any]] = {
        "auto_reply": {"source_msg_uid": f"m-{rid}"},
        "ticket_notify": {"business_id": f"T-{rid}", "status_version": 1},
    }
    kind_fields = by_kind.get(kind, {})
    return {
        "request_id": rid, "kind": kind, "created_by": "chaos:hostile",
        "message": {"type": "text", "content": "Hi {name}" + salt.replace("{", "{{").replace("}", "}}")},
        "targets": {"mode": "snapshot", "items": [
            {"guid": guid, "to_id": f"{rid}-{i}", "vars": {"name": f"n{i}{salt}"}} for i in range(n)]},
        "expire_at": (datetime.now(UTC) + expire_in).isoformat(), **kind_fields, **extra,
    }


def _dump(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _replace(doc: dict[str, Any], old: str, new: str) -> bytes:
    text = json.dumps(doc)
    assert old in text
    return text.replace(old, new, 1).encode()


def _nul_in(field: str) -> Callable[[str, str], bytes]:
    def build(rid: str, salt: str) -> bytes:
        d = base(rid, salt)
        target = d["targets"]["items"][0]
        if field in target:
            target[field] = f"{target[field]}\u0000{salt}"
        elif field == "var":
            target["vars"]["name"] = f"a\u0000{salt}"
        elif field == "var_name":
            target["vars"][f"k\u0000{salt}"] = "x"
        elif field == "content":
            d["message"]["content"] = f"Hi\u0000{salt}"
        else:
            d[field] = f"{d[field]}\u0000{salt}"
        return _dump(d)
    return build


def _surrogate(rid: str, salt: str) -> bytes:
    d = base(rid, salt)
    d["targets"]["items"][0]["to_id"] = "SURROGATE"
    return _replace(d, '"SURROGATE"', '"r\\ud800x"')


def _number(field: str) -> Callable[[str, str], bytes]:
    def build(rid: str, salt: str) -> bytes:
        if field == "status_version":
            return _dump(base(rid, salt, kind="ticket_notify") | {"status_version": INT4_OVER + len(salt)})
        if field == "budget":
            return _dump(base(rid, salt, budget={"max_sends": INT4_OVER}))
        return _dump(base(rid, salt) | {field: INT4_OVER + len(salt)})
    return build


def _big_content(rid: str, salt: str) -> bytes:
    d = base(rid, salt)
    d["message"]["content"] = "{name}" * 3
    d["targets"]["items"][0]["vars"]["name"] = ("x" + salt) * (2000 // (len(salt) + 1) + 1)
    return _dump(d)


def _long_key(rid: str, salt: str) -> bytes:
    wide = ("é" * 256)
    d = base(rid, salt, guid=wide)
    d["targets"]["items"][0]["to_id"] = wide
    return _dump(d)


def _duplicate_key(rid: str, salt: str) -> bytes:
    return _replace(base(rid, salt), '"created_by": "chaos:hostile"',
                    '"created_by": "chaos:hostile", "created_by": "someone:else"')


def _deep(rid: str, salt: str) -> bytes:
    d = base(rid, salt)
    d["targets"]["items"][0]["vars"]["name"] = "DEEP"
    return _replace(d, '"DEEP"', "[" * 3000 + "]" * 3000)


def _huge_array(rid: str, salt: str) -> bytes:
    return _dump(base(rid, salt) | {"extra": list(range(50_000))})


def _root(rid: str, salt: str) -> bytes:
    return _dump([base(rid, salt)])


def _invalid_utf8(rid: str, salt: str) -> bytes:
    return _dump(base(rid, salt)).replace(b'"Hi ', b'"Hi \xff\xfe', 1)


def _empty(rid: str, salt: str) -> bytes:
    return b""


def _naive(rid: str, salt: str) -> bytes:
    return _dump(base(rid, salt) | {"expire_at": "2099-01-01T00:00:00"})


def _expired(rid: str, salt: str) -> bytes:
    return _dump(base(rid, salt, expire_in=-timedelta(minutes=1)))


def _too_many_vars(rid: str, salt: str) -> bytes:
    d = base(rid, salt)
    d["targets"]["items"][0]["vars"] = {f"v{i}": salt for i in range(100)} | {"name": "x"}
    return _dump(d)


BUILDERS: dict[str, Callable[[str, str], bytes]] = {
    "nul_to_id": _nul_in("to_id"), "nul_guid": _nul_in("guid"), "nul_var": _nul_in("var"),
    "nul_var_name": _nul_in("var_name"), "nul_content": _nul_in("content"), "nul_created_by": _nul_in("created_by"),
    "lone_surrogate": _surrogate,
    "content_version_overflow": _number("content_version"), "status_version_overflow": _number("status_version"),
    "budget_overflow": _number("budget"), "priority_overflow": _number("priority"),
    "rendered_too_long": _big_content, "key_too_long": _long_key, "too_many_vars": _too_many_vars,
    "duplicate_key": _duplicate_key, "deep_nesting": _deep, "huge_array": _huge_array, "array_root": _root,
    "invalid_utf8": _invalid_utf8, "empty": _empty, "naive_timestamp": _naive, "expired": _expired,
}


def hostile(kind: str, rid: str, salt: str = "") -> bytes:
    return BUILDERS[kind](rid, salt)
