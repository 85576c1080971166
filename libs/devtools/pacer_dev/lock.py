"""The image's dependency locks, compiled by uv from pyproject.toml (``make lock``).

``runtime.lock`` pins (with hashes) every runtime dependency of the ``pacer`` distribution
for Python 3.11 on any platform; ``build.lock`` pins pip and the build backend. Compiling again with
the committed locks as the starting point keeps every pin that still satisfies pyproject, so
the result equals the committed file unless pyproject changed (a test checks that).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LOCK_DIR = REPO / "deploy" / "docker"
PYTHON_VERSION = "3.11"


def _uv() -> str:
    return str(Path(sys.executable).with_name("uv"))


def _compile(src: list[str], out: Path, stdin: str | None = None) -> None:
    cmd = [_uv(), "pip", "compile", *src, "--python-version", PYTHON_VERSION, "--universal",
           "--generate-hashes", "--quiet", "--custom-compile-command", "make lock", "-o", str(out)]
    subprocess.run(cmd, cwd=REPO, input=stdin, text=True, check=True)


def build_requirements() -> str:
    """pip and the build-system requirements of pyproject.toml, one a line."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return "\n".join(["pip", *requires]) + "\n"


def compile_locks(out_dir: Path = LOCK_DIR) -> tuple[Path, Path]:
    """Write runtime.lock and build.lock into ``out_dir``; pins already there are kept where they fit."""
    runtime, build = out_dir / "runtime.lock", out_dir / "build.lock"
    _compile(["pyproject.toml"], runtime)
    _compile(["-"], build, stdin=build_requirements())
    return runtime, build


def main() -> None:
    for path in compile_locks():
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
