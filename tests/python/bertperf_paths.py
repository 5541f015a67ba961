"""Where the Python tests find the C++ programs they drive: $BERTPERF_BUILD_DIR if set, else the
most recently built build*/bin of the repository."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_binary(name):
    """Path of build*/bin/<name> (newest first), or None when it has not been built."""
    build_dir = os.environ.get("BERTPERF_BUILD_DIR")
    candidates = [Path(build_dir) / "bin" / name] if build_dir else sorted(
        REPO.glob("build*/bin/" + name), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None
