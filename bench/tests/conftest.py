import os
import shutil
import sys
from pathlib import Path

import pytest

# make `import memofs_bench` work from any cwd without installing the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memofs_bench import inputs  # noqa: E402

# The real family's downloads stay in the user's inputs cache (tests never fetch them).
INPUTS = str(inputs.inputs_dir())


def pytest_collection_modifyitems(config, items):
    """Smoke tests mount tmpfs and compile C helpers: skip them, saying why, where that is
    impossible (the statistics and formatting tests still run)."""
    reason = None
    if os.geteuid() != 0:
        reason = "smoke runs mount tmpfs and need root"
    elif not shutil.which("cc"):
        reason = "smoke runs compile C helpers and need cc"
    if reason:
        for item in items:
            if "smoke" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # compiled helpers and the tree tarball go into one cache shared by the session's tests
    monkeypatch.setenv("MEMOFS_BENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("MEMOFS_BENCH_INPUTS", INPUTS)
