"""The committed dependency locks are in step with pyproject.toml (`make lock` regenerates)."""

from __future__ import annotations

import shutil

from pacer_dev.lock import LOCK_DIR, compile_locks


def test_locks_are_in_step_with_pyproject(tmp_path):
    for name in ("runtime.lock", "build.lock"):
        shutil.copy(LOCK_DIR / name, tmp_path / name)
    for fresh in compile_locks(tmp_path):
        committed = (LOCK_DIR / fresh.name).read_text()
        assert fresh.read_text() == committed, f"{fresh.name} is stale: run `make lock` and commit it"
