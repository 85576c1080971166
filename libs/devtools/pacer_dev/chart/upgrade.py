"""Upgrades from earlier charts: no object turns from an ordinary object of the release into a
Helm hook, or back, under the same kind and name.

Helm keeps hooks out of a release's manifest. An upgrade runs the pre-upgrade hooks, then
deletes every object of the last release's manifest the new one lacks, by kind, namespace and
name, whatever stands there by then (pkg/kube ``Client.Update``; only
``helm.sh/resource-policy: keep`` on the live object spares it). So an ordinary object that
becomes a hook of the same name is created afresh by the first upgrade's hook and deleted by
the same upgrade. The other way round, a hook is never deleted as part of a release, so the
ordinary object that takes its name finds it in the way and the upgrade fails.

The earlier charts are taken from git: the chart just before each commit that added or removed
a ``helm.sh/hook`` annotation (the last of each layout of hooks), and the chart at HEAD (for a
change not yet committed). Each is rendered with its own ``ci/`` values files.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from pacer_dev.chart.check import CHART, NAMESPACE, REPO, VALUE_SETS, ChartError, ValueSet, render

HOOK = "helm.sh/hook"
_CHART_PATH = CHART.relative_to(REPO).as_posix()

Identity = tuple[str, str, str]  # kind, namespace, name: what Helm matches an object by


def _git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise ChartError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def history_missing() -> str | None:
    """Why the chart's git history cannot be read here (a shallow clone, a source archive), or
    None if it can."""
    try:
        shallow = _git("rev-parse", "--is-shallow-repository").strip() == "true"
    except (ChartError, OSError) as exc:
        return f"the upgrade check reads the chart's git history, and this is no git checkout ({exc})"
    if shallow:
        return "the upgrade check reads the chart's git history: fetch it whole (git fetch --unshallow)"
    return None


def earlier_charts() -> list[str]:
    """The commits whose chart an upgrade to this one is checked from, oldest first."""
    if (why := history_missing()) is not None:
        raise ChartError(why)
    revisions = []
    for line in _git("log", "--reverse", "--format=%H %P", "-G", r"helm\.sh/hook", "--", _CHART_PATH).splitlines():
        _, *parents = line.split()
        if parents and _git("ls-tree", "--name-only", parents[0], f"{_CHART_PATH}/Chart.yaml").strip():
            revisions.append(parents[0])
    head = _git("rev-parse", "HEAD").strip()
    return [*dict.fromkeys([*revisions, head])]


def _identity(obj: dict) -> Identity:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", NAMESPACE), meta["name"]


def is_hook(obj: dict) -> bool:
    return HOOK in (obj["metadata"].get("annotations") or {})


def conflicts(before: list[dict], after: list[dict], where: str) -> list[str]:
    """What goes wrong upgrading a release rendered as ``before`` to ``after``."""
    was = {_identity(o): is_hook(o) for o in before}
    problems = []
    for obj in after:
        kind, _, name = key = _identity(obj)
        hook = is_hook(obj)
        if key not in was or was[key] == hook:
            continue
        if hook:
            problems.append(f"{kind}/{name} is an ordinary object {where} and a hook now: the first upgrade "
                            "from it deletes the hook as an object gone from the release; give the hook a name of its own")
        else:
            problems.append(f"{kind}/{name} is a hook {where} and an ordinary object now: the upgrade from it "
                            "finds the old hook, which Helm never deletes, in the way; give the object a name of its own")
    return problems


def _extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", revision, _CHART_PATH],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise ChartError(f"git archive {revision}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / _CHART_PATH


def check_upgrades(value_sets: tuple[ValueSet, ...] = VALUE_SETS) -> list[str]:
    """Raise ChartError when an upgrade from an earlier chart would delete a hook or fail on
    one. Returns the earlier charts' commits."""
    revisions = earlier_charts()
    now = {vs.name: render(vs.releases[0], vs.file, *vs.release_args(vs.releases[0])) for vs in value_sets}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pacer-chart-") as tmp:
        for revision in revisions:
            chart = _extract(revision, Path(tmp) / revision)
            for vs in value_sets:
                values = chart / "ci" / vs.file.name
                if not values.exists():
                    continue
                release = vs.releases[0]
                before = render(release, values, *vs.release_args(release), chart=chart)
                problems += conflicts(before, now[vs.name], f"at {revision[:7]} ({vs.name} values)")
    if problems:
        raise ChartError("; ".join(dict.fromkeys(problems)))
    return revisions


def main() -> int:
    try:
        revisions = check_upgrades()
    except ChartError as exc:
        print(f"chart: upgrades FAILED: {exc}")
        return 1
    print(f"chart: upgrades from {len(revisions)} earlier charts ({' '.join(r[:7] for r in revisions)}) "
          "keep every hook and ordinary object apart ok")
    return 0

