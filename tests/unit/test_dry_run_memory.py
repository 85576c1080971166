"""A dry run as large as PACER_CONTROL_DRY_RUN_MAX_BYTES lets in, of the heaviest shape a
request can have, fits in a control pod's memory as the chart limits it, with room to spare
for everything else the pod serves meanwhile. In a process of its own, with the whole app
imported (as a control pod holds it), its peak resident memory measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from pacer_control.settings import ControlSettings
from tests.unit.heavy_requests import PEAK, heaviest

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "pacer" / "values.yaml"
HEADROOM = 96 * 1024 * 1024  # the rest of what a pod serves during a dry run (the idle service is in the peak)
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}

PROBE = PEAK + """
import sys
from pacer_common.db.pool import new_pool
from pacer_control.app import build_app
app = build_app(new_pool("postgresql:///unused"))  # never opened: a dry run reads no database
raw = open(sys.argv[1], "rb").read()
done = app.state.control.dry_run(raw, 50)
assert done.items > 1000, done
print(peak())
"""


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
