"""A real Prometheus for tests and ``make up``: Debian's ``prometheus`` package, run as our
own process on a loopback port with a temporary config and storage (never the Debian
service). ``python -m pacer_dev.prometheus ensure`` installs the package where it is missing
and we are root (``make test`` runs it first); it brings ``promtool`` too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "prometheus" / "pacer-rules.yml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "pacer-rules.test.yml"
DASHBOARDS = ROOT / "deploy" / "grafana"


def binary(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/bin/{name}",) if os.access(p, os.X_OK)), None)


def ensure_installed() -> str:
    """The path of ``prometheus``, installing Debian's package if it is missing (as root).
    ``RUNLEVEL=1`` keeps the package's service from being started."""
    found = binary("prometheus")
    if found and binary("promtool"):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("prometheus/promtool not found: install Debian's `prometheus` package "
                         "(apt-get install prometheus) or put both binaries on PATH")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "RUNLEVEL": "1"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    subprocess.run(["apt-get", *lock, "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", "prometheus"],
                   check=True, env=env)
    found = binary("prometheus")
    if not found or not binary("promtool"):
        raise SystemExit("apt-get installed prometheus but its binaries are not on PATH")
    return found


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = binary("promtool")
    if tool is None:
        raise RuntimeError("promtool not found: run `make test` (it installs Debian's prometheus package)")
    return subprocess.run([tool, *args], capture_output=True, text=True, cwd=ROOT, check=False)


def scrape_config(targets: Mapping[str, Sequence[str]], interval_s: float = 1.0,
                  rule_files: Sequence[str] = ()) -> dict[str, Any]:
    """``targets``: job name → host:port list (each serves /metrics)."""
    return {
        "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": f"{interval_s:g}s",
                   "scrape_timeout": f"{interval_s:g}s"},
        "rule_files": list(rule_files),
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(hosts)}]}
                           for job, hosts in sorted(targets.items()) if hosts],
    }


def argv(config: Path, storage: Path, port: int) -> list[str]:
    exe = binary("prometheus")
    if exe is None:
        raise RuntimeError("prometheus not found: run `make test` or `python -m pacer_dev.prometheus ensure`")
    return [exe, f"--config.file={config}", f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d", "--web.enable-lifecycle",
            "--log.level=warn"]


def write_config(directory: Path, targets: Mapping[str, Sequence[str]], interval_s: float = 1.0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rules = directory / "pacer-rules.yml"
    shutil.copyfile(RULES, rules)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(scrape_config(targets, interval_s, [str(rules)]), sort_keys=False))
    return path


class Client:
    """The few HTTP API calls tests and ``make up`` need."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] in ("vector", "matrix") else [data]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self._get("/api/v1/targets")["activeTargets"]
        return active

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self._get("/api/v1/rules")["groups"] for r in g["rules"]]

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus at {self.url} not ready after {timeout_s:g}s")
            time.sleep(0.1)


def main() -> None:
    if sys.argv[1:] != ["ensure"]:
        raise SystemExit("usage: python -m pacer_dev.prometheus ensure")
    print(f"prometheus: {ensure_installed()}")


if __name__ == "__main__":
    main()
