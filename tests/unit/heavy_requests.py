"""The request that takes the most memory per byte to plan, and a probe's peak memory: for the
tests that hold planning and the dry run to a memory bound, each in a process of its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pacer_common.domain.requests import MAX_TEMPLATE_CHARS

# Put at the head of a probe run with ``python -c``: ``peak()`` is the probe's own peak resident
# memory (VmHWM). ru_maxrss would carry the peak of the process that started it across the fork
# and the exec: a test process's whole heap, which grows with the tests run before.
PEAK = """
import re, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))  # a test gone wrong fails; it does not take the machine
def peak():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read())[1]) * 1024
"""


def heaviest(size: int) -> bytes:
    """A valid request of at most ``size`` bytes whose messages render to the most per byte: the
    longest template, of emoji (4 bytes a character once rendered), with one field, so every
    target's message is a string of its own; as many of the smallest targets as fit."""
    head = {"request_id": "heavy", "kind": "campaign", "created_by": "t", "content_version": 1,
            "message": {"type": "text", "content": "\U0001F600" * (MAX_TEMPLATE_CHARS - 3) + "{n}"},
            "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
            "targets": {"mode": "snapshot", "items": []}}
    shell = json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode()
    parts, used, n = [], len(shell), 0
    while True:
        part = b'{"guid":"g%d","to_id":"%d","vars":{"n":""}}' % (n % 1000, n)
        if used + len(part) + 1 > size:
            break
        parts.append(part)
        used, n = used + len(part) + 1, n + 1
    raw = shell.replace(b'"items":[]', b'"items":[' + b",".join(parts) + b"]")
    assert len(raw) <= size
    return raw
