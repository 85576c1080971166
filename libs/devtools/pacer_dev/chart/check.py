"""Lint and render the Helm chart for each value set and validate every object it renders.

Kubernetes kinds are validated by ``kubernetes-validate`` (strict: unknown fields refused)
against several Kubernetes versions; the custom resources (ServiceMonitor, PrometheusRule,
KEDA ScaledObject) against JSON schemas written from their CRDs (``crds/``). Every template
in the chart is rendered, so a template added later is covered without a change here.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from pacer_dev.tools import ensure_helm

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "deploy" / "helm" / "pacer"
# Kubernetes versions whose schemas every rendered object must satisfy: the oldest, a middle and
# the newest of those kubernetes-validate ships that the chart supports.
KUBE_VERSIONS = ("1.29.0", "1.33.0", "1.37.0")
NAMESPACE = "pacer"
_CRDS = Path(__file__).with_name("crds")
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.json",
}


@dataclass(frozen=True)
class ValueSet:
    """One file of ``ci/``, rendered under one or more release names."""

    name: str
    releases: tuple[str, ...] = ("pacer",)

    @property
    def file(self) -> Path:
        return CHART / "ci" / f"{self.name}-values.yaml"

    def release_args(self, release: str) -> list[str]:
        # Tenants share a namespace: each release has its own topics and consumer groups.
        return ["--set", f"kafka.topicPrefix={release}"] if len(self.releases) > 1 else []


VALUE_SETS = (
    ValueSet("minimal"),
    ValueSet("full"),
    ValueSet("tenants", ("tenant-a", "tenant-b", "tenant-c")),
    ValueSet("external"),
)


class ChartError(Exception):
    pass


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ensure_helm()), *args], capture_output=True, text=True, check=False)


def lint(values: Path | None = None, *extra: str) -> subprocess.CompletedProcess[str]:
    return helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []), *extra)


def template(release: str, values: Path | None = None, *extra: str,
             chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return helm("template", release, str(chart), "--namespace", NAMESPACE,
                *(["-f", str(values)] if values else []), *extra)


def render(release: str, values: Path | None = None, *extra: str, chart: Path = CHART) -> list[dict]:
    out = template(release, values, *extra, chart=chart)
    if out.returncode != 0:
        raise ChartError(f"helm template failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@cache
def _crd_schema(file: str) -> dict:
    return json.loads((_CRDS / file).read_text())


def validate(obj: dict, kube_versions: tuple[str, ...] = KUBE_VERSIONS) -> None:
    """Raise ChartError when ``obj`` is not a valid object of its kind."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    crd = CRD_SCHEMAS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if crd:
        try:
            jsonschema.validate(obj, _crd_schema(crd))
        except jsonschema.ValidationError as exc:
            raise ChartError(f"{where}: {exc.message} at {'/'.join(map(str, exc.absolute_path))}") from exc
        return
    for version in kube_versions:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise ChartError(f"{where} (Kubernetes {version}): {exc.message} at "
                             f"{'/'.join(map(str, exc.absolute_path))}") from exc
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise ChartError(f"{where}: {exc.message}") from exc


def replaced_before_its_hook_runs(obj: dict) -> bool:
    """A hook object is deleted before Helm creates it again: a hook that failed, or that has
    no hook-succeeded, stays behind, and creating it again would fail. Helm's default, with no
    delete policy, is before-hook-creation. True for an ordinary object."""
    annotations = obj["metadata"].get("annotations") or {}
    policy = annotations.get("helm.sh/hook-delete-policy")
    if "helm.sh/hook" not in annotations or policy is None:
        return True
    return "before-hook-creation" in {p.strip() for p in policy.split(",")}


def check(vs: ValueSet) -> Counter[str]:
    """Lint and render one value set; validate every object. Returns the kinds rendered."""
    kinds: Counter[str] = Counter()
    names: set[tuple[str, str]] = set()
    for release in vs.releases:
        linted = lint(vs.file, *vs.release_args(release))
        if linted.returncode != 0:
            raise ChartError(f"helm lint --strict failed:\n{linted.stdout}{linted.stderr}")
        for obj in render(release, vs.file, *vs.release_args(release)):
            validate(obj)
            key = (obj["kind"], obj["metadata"]["name"])
            if key in names:
                raise ChartError(f"{key[0]}/{key[1]} is rendered twice in one namespace")
            if not replaced_before_its_hook_runs(obj):
                raise ChartError(f"{key[0]}/{key[1]}: a hook whose delete policy leaves out before-hook-creation "
                                 "fails the next install or upgrade once it is left behind (\"already exists\")")
            names.add(key)
            kinds[obj["kind"]] += 1
    return kinds


def main() -> int:
    failed = 0
    versions = ",".join(v.rsplit(".", 1)[0] for v in KUBE_VERSIONS)
    for vs in VALUE_SETS:
        try:
            kinds = check(vs)
        except ChartError as exc:
            failed += 1
            print(f"chart: values={vs.name} FAILED: {exc}")
            continue
        summary = " ".join(f"{k}={n}" for k, n in sorted(kinds.items()))
        print(f"chart: values={vs.name} releases={len(vs.releases)} objects={sum(kinds.values())} "
              f"kubernetes={versions} ok ({summary})")
    return 1 if failed else 0
