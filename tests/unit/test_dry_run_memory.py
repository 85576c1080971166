"""A dry run as large as PACER_CONTROL_DRY_RUN_MAX_BYTES lets in, of the heaviest shape a
request can have, fits in a control pod's memory as the chart limits it, with room to spare
for everything else the pod serves meanwhile. In a process of its own, with the whole app
imported (as a control pod holds it), its peak resident memory measured."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from pacer_common.domain.requests import MAX_TEMPLATE_CHARS
from pacer_control.settings import ControlSettings

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "pacer" / "values.yaml"
HEADROOM = 96 * 1024 * 1024  # the rest of what a pod serves during a dry run (the idle service is in the peak)
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}

PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))  # a test gone wrong fails; it does not take the machine
from pacer_common.db.pool import new_pool
from pacer_control.app import build_app
app = build_app(new_pool("postgresql:///unused"))  # never opened: a dry run reads no database
raw = open(sys.argv[1], "rb").read()
done = app.state.control.dry_run(raw, 50)
assert done.items > 1000, done
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def heaviest(size: int) -> bytes:
    """A valid request of at most ``size`` bytes that takes the most memory per byte to plan: the
    longest template, of emoji (4 bytes a character once rendered), with one field, so every target's
    message is a string of its own; as many of the smallest targets as fit."""
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


def control_memory_limit() -> int:
    limit = str(yaml.safe_load(VALUES.read_text())["control"]["resources"]["limits"]["memory"])
    found = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", limit)
    assert found is not None, f"control's memory limit {limit!r} is not in Ki, Mi or Gi"
    return int(found[1]) * UNITS[found[2]]


def test_the_largest_dry_run_of_the_heaviest_shape_fits_a_control_pods_memory(tmp_path: Path) -> None:
    values = yaml.safe_load(VALUES.read_text())["control"]
    cap = max(ControlSettings().dry_run_max_bytes, values["dryRunMaxBytes"])  # the setting's default, the chart's
    request = tmp_path / "heavy.json"
    request.write_bytes(heaviest(cap))
    out = subprocess.run([sys.executable, "-c", PROBE, str(request)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    peak, limit = int(out.stdout.strip()), control_memory_limit()
    assert peak + HEADROOM <= limit, (
        f"a dry run of {cap:,} bytes (PACER_CONTROL_DRY_RUN_MAX_BYTES) peaked at {peak / 2**20:.0f} MiB: with "
        f"{HEADROOM / 2**20:.0f} MiB for the rest, over the chart's control memory limit of {limit / 2**20:.0f} MiB")
