"""Debian's chromium for the console's browser tests (Playwright never downloads a browser here).

``chromium_path()`` finds it, and installs it with apt where it is missing and we are root.
Other apt users may hold the dpkg lock: apt waits for it (``DPkg::Lock::Timeout``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

CANDIDATES = ("chromium", "chromium-browser")


def _found() -> str | None:
    for name in CANDIDATES:
        if path := shutil.which(name):
            return path
    return None


def chromium_path() -> str:
    """The chromium binary, installed first (``apt-get install chromium``) if absent and root."""
    if path := os.environ.get("PACER_CHROMIUM") or _found():
        return path
    if os.geteuid() != 0:
        raise RuntimeError("chromium is not installed and this is not root: run "
                           "`sudo apt-get install -y chromium`, or set PACER_CHROMIUM to a chromium binary")
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    subprocess.run(["apt-get", *lock, "update"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", *lock, "install", "-y", "--no-install-recommends", "chromium"], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    path = _found()
    if path is None:
        raise RuntimeError("apt-get installed chromium but no chromium binary is on PATH")
    return path
