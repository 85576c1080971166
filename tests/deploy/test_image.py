"""The image: hadolint-clean, locked dependencies by hash, and no developer tools inside."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pacer_dev.lock import REPO

DOCKERFILE = REPO / "Dockerfile"
SERVICES = ("pacer_common", "pacer_planner", "pacer_sender", "pacer_reconciler", "pacer_control", "pacer_intake")


def _build_stage() -> str:
    text = DOCKERFILE.read_text()
    return text[text.index(" AS build"):text.index(" AS runtime")]


def test_dockerfile_is_hadolint_clean():
    run = subprocess.run([str(Path(sys.executable).with_name("hadolint")), str(DOCKERFILE)],
                         check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_pip_install_is_locked_by_hash():
    installs = re.findall(r"pip install[^\n&]*", _build_stage())
    assert installs
    for cmd in installs:
        assert "--require-hashes" in cmd or "--no-deps --no-build-isolation ." in cmd, cmd
    assert "build.lock" in _build_stage() and "runtime.lock" in _build_stage()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from exactly what the Dockerfile's build stage copies."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    copied = [m.group(1).split() for m in re.finditer(r"^COPY (?!--)(.+) \S+$", _build_stage(), re.MULTILINE)]
    for sources in copied:
        for rel in sources:
            path = REPO / rel
            if path.is_dir():
                shutil.copytree(path, src / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(src)],
                   check=True)
    (built,) = out.glob("pacer-*.whl")
    return built


def test_the_image_gets_the_services_and_no_developer_tools(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    tops = {n.split("/")[0] for n in names if not n.startswith("pacer-")}
    assert tops == set(SERVICES)
    assert not [n for n in names if "pacer_dev" in n]
    assert "pacer_dev" not in entry_points
    for script in ("pacer", "pacer-planner", "pacer-sender", "pacer-reconciler", "pacer-control", "pacer-intake"):
        assert re.search(rf"^{script} = ", entry_points, re.MULTILINE), script
    # The migrations and SQL queries ship with the services.
    assert any(n.startswith("pacer_common/db/migrations/") and n.endswith(".sql") for n in names)


def test_the_build_tools_removed_from_the_image_are_no_runtime_dependency():
    (removed,) = re.findall(r"pip uninstall --yes ([^\n\\]+)", _build_stage())
    runtime = set(re.findall(r"^([A-Za-z0-9_.-]+)==", (REPO / "deploy" / "docker" / "runtime.lock").read_text(), re.MULTILINE))
    assert set(removed.split()) == {"pip", "setuptools", "wheel", "packaging"}
    assert not set(removed.split()) & runtime
