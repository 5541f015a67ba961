"""Where the Python tests find the C++ programs they drive: $BERTPERF_BUILD_DIR if set, else the
project's build/ (what scripts/build.sh makes), else the most recently built build*/ directory."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_binary(name):
    """Path of <build dir>/bin/<name>, or None when it has not been built."""
    build_dir = os.environ.get("BERTPERF_BUILD_DIR")
    if build_dir:
        candidates = [Path(build_dir) / "bin" / name]
    else:
        others = sorted(REPO.glob("build*/bin/" + name), key=lambda p: p.stat().st_mtime, reverse=True)
        candidates = [REPO / "build" / "bin" / name] + others
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None
