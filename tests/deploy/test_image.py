"""The image: hadolint-clean, locked dependencies by hash, and no developer tools inside."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths

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


def _context() -> set[str]:
    """The files of the build context: the checkout's, less what .dockerignore leaves out, by
    Docker's own rules (the docker SDK's implementation of them)."""
    patterns = (REPO / ".dockerignore").read_text().splitlines()
    return {p for p in exclude_paths(str(REPO), patterns) if (REPO / p).is_file()}


def _copied(stage: str) -> list[str]:
    """The sources of a stage's COPY instructions (not those from another stage)."""
    return [rel for m in re.finditer(r"^COPY (?:--chmod=\S+ )?(?!--)(.+) \S+$", stage, re.MULTILINE)
            for rel in m.group(1).split()]


def test_every_file_the_dockerfile_copies_is_in_the_build_context():
    context, text = _context(), DOCKERFILE.read_text()
    for rel in _copied(text):
        found = rel in context or any(f.startswith(rel.rstrip("/") + "/") for f in context)
        assert found, f"COPY {rel}: left out of the build context by .dockerignore"
    assert not [f for f in context if f.startswith(("tests/", ".pacer/", ".venv/"))]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from exactly what the Dockerfile's build stage copies out of the build
    context."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    context = _context()
    for rel in _copied(_build_stage()):
        for f in sorted(f for f in context if f == rel or f.startswith(rel.rstrip("/") + "/")):
            if "__pycache__" in f or ".egg-info" in f:
                continue
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(src)],
                   check=True)
    (built,) = out.glob("pacer-*.whl")
    return built


def test_the_image_gets_the_services_and_no_developer_tools(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/")[0] for n in names if not n.startswith("pacer-")}
    assert tops == set(SERVICES)
    assert not [n for n in names if "pacer_dev" in n]
    assert "pacer_dev" not in entry_points
    for script in ("pacer", "pacer-planner", "pacer-sender", "pacer-reconciler", "pacer-control", "pacer-intake"):
        assert re.search(rf"^{script} = ", entry_points, re.MULTILINE), script
    # The image installs what the wheel requires: uvicorn's C parser and the OTLP exporter among it.
    required = {re.split(r"[<>=;\[ ]", line.removeprefix("Requires-Dist: "))[0].lower()
                for line in metadata.splitlines() if line.startswith("Requires-Dist: ") and "extra ==" not in line}
    assert {"httptools", "opentelemetry-exporter-otlp-proto-http", "uvicorn"} <= required, sorted(required)
    # The migrations and SQL queries ship with the services, and the console its vendored
    # scripts (without htmx every console page is blank; the CSP loads nothing from elsewhere).
    assert any(n.startswith("pacer_common/db/migrations/") and n.endswith(".sql") for n in names)
    static = "pacer_control/api/console/static/"
    shipped = {n.removeprefix(static) for n in names if n.startswith(static)}
    in_repo = {str(p.relative_to(REPO / "services/control" / static)) for p in
               (REPO / "services/control" / static).rglob("*") if p.is_file()}
    assert "vendor/htmx-2.0.11/htmx.min.js" in in_repo and shipped == in_repo, sorted(in_repo - shipped)


def test_the_build_tools_removed_from_the_image_are_no_runtime_dependency():
    (removed,) = re.findall(r"pip uninstall --yes ([^\n\\]+)", _build_stage())
    runtime = set(re.findall(r"^([A-Za-z0-9_.-]+)==", (REPO / "deploy" / "docker" / "runtime.lock").read_text(), re.MULTILINE))
    assert set(removed.split()) == {"pip", "setuptools", "wheel", "packaging"}
    assert not set(removed.split()) & runtime
