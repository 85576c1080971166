"""Unit tests: pure code only, no servers, no network, no sleeps.

Hypothesis keeps a cache under ``./.hypothesis`` by default; point it at a throwaway
directory so a unit run leaves nothing behind in the working tree.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import configuration

if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    _home = tempfile.mkdtemp(prefix="pacer-unit-hypothesis-")
    configuration.set_hypothesis_home_dir(_home)
    atexit.register(shutil.rmtree, _home, True)
