"""Build-once developer tools kept outside the repository: helm, built from the Go module proxy.

``python -m pacer_dev.tools helm`` builds the pinned helm into ``~/.cache/pacer/tools`` when it
is missing (a few minutes of CPU the first time) and prints its path. ``$PACER_CACHE_DIR``
replaces ``~/.cache/pacer``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.21.4"


def tools_dir() -> Path:
    env = os.environ.get("PACER_CACHE_DIR")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "pacer") / "tools"


def helm_path() -> Path:
    return tools_dir() / f"helm-{HELM_VERSION}" / "helm"


def ensure_helm() -> Path:
    """The pinned helm binary, built with ``go install`` into the cache when missing."""
    target = helm_path()
    if target.exists():
        return target
    go = shutil.which("go") or "/usr/local/go/bin/go"
    cache = tools_dir()
    staging = cache / f"helm-{HELM_VERSION}.building"
    shutil.rmtree(staging, ignore_errors=True)
    env = {
        **os.environ,
        "GOPATH": str(cache / "go"),
        "GOMODCACHE": str(cache / "go" / "pkg" / "mod"),
        "GOCACHE": str(cache / "go-build"),
        "GOFLAGS": "-modcacherw",
        "GOBIN": str(staging),
        "CGO_ENABLED": "0",
    }
    print(f"building helm {HELM_VERSION} from the Go module proxy into {target.parent} (once)", file=sys.stderr)
    ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
    subprocess.run([go, "install", "-ldflags", ldflags, f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"],
                   env=env, check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    (staging / "helm").replace(target)
    shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args != ["helm"]:
        sys.exit("usage: python -m pacer_dev.tools helm")
    print(ensure_helm())


if __name__ == "__main__":
    main()
