"""Planning a request takes memory bounded by the request's bytes, not by what its targets'
messages render to: a 4,096-character template of emoji sent to many tiny targets renders to
hundreds of times its request, and a planner holding every rendered message would be killed
on a valid request of a few MiB, again on every redelivery. In a process of its own, its peak
resident memory measured over the whole path: validation, the plan, every item's stored
content and every command encoded (what the store and the bus read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.heavy_requests import PEAK, heaviest

SIZE = 4 * 1024 * 1024
# What planning holds per target (its parsed fields, key and item) does not depend on the
# template: about 25 times the bytes of the smallest target. Rendered and kept, this request's
# messages alone would be about 330 times.
BOUND = 40 * SIZE

PROBE = PEAK + """
from datetime import UTC, datetime
from pacer_common.domain.validation import validate_request
from pacer_planner.core.intake import commands_for
from pacer_planner.domain.planning import plan
raw = open(sys.argv[1], "rb").read()
before = peak()
now = datetime.now(UTC)
p = plan(validate_request(raw, now), now)
stored = [p.stored_content(it) for it in p.items]  # all the job's one text: none stored per item
rendered = sum(len(it.content) for it in p.items)
encoded = sum(len(value) for _, value in commands_for(p, {shard: 1 for shard in p.shards}).encoded())
assert len(p.items) > 50_000 and rendered > 4000 * len(p.items) and encoded > 16_000 * len(p.items)
print(peak() - before)
"""


def test_planning_the_heaviest_request_takes_memory_bounded_by_its_size(tmp_path: Path) -> None:
    request = tmp_path / "heavy.json"
    request.write_bytes(heaviest(SIZE))
    out = subprocess.run([sys.executable, "-c", PROBE, str(request)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    grown = int(out.stdout.strip())
    assert grown <= BOUND, (f"planning a request of {SIZE / 2**20:.0f} MiB took {grown / 2**20:.0f} MiB, over "
                            f"{BOUND / 2**20:.0f} MiB ({BOUND // SIZE} times its size)")


def test_a_validated_request_keeps_its_targets_not_the_parsed_document() -> None:
    """What validation leaves for planning is each target's checked fields and key, about 220
    bytes a target without variables; holding the parsed JSON objects too took about 460. A
    guid named by many targets is one string for all of them."""
    import json
    import tracemalloc
    from datetime import UTC, datetime, timedelta

    from pacer_common.domain.validation import validate_request

    n = 20_000
    raw = json.dumps({"request_id": "r", "kind": "campaign", "created_by": "t", "content_version": 1,
                      "message": {"type": "text", "content": "hi"},
                      "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
                      "targets": {"mode": "snapshot", "items": [
                          {"guid": f"guid-{i % 10}", "to_id": f"room-{i}"} for i in range(n)]}}).encode()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        valid = validate_request(raw, datetime.now(UTC))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept / n <= 300, f"validation keeps {kept / n:.0f} bytes a target"
    assert valid.targets is not None
    targets = list(valid.targets.targets)
    assert len(targets) == n and len({id(t.guid) for t in targets}) == 10
