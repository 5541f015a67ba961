"""The committed Unicode tables of the tokenizer (implementations/data/unicode_tables.cpp) are what
scripts/gen_unicode_tables.py makes from this Python's unicodedata: a stale or hand-edited table
fails here. Skipped when this Python ships another Unicode version than the committed one."""
import re
import subprocess
import sys
import unicodedata

import pytest

from bertperf_paths import REPO

TABLES = REPO / "implementations" / "data" / "unicode_tables.cpp"


def committed_version():
    match = re.search(r"\(Unicode ([0-9.]+)\)", TABLES.read_text(encoding="utf-8"))
    assert match, f"{TABLES}: no Unicode version in the header"
    return match.group(1)


def test_generated_tables_are_current(tmp_path):
    if committed_version() != unicodedata.unidata_version:
        pytest.skip(f"tables are for Unicode {committed_version()}, this Python has "
                    f"{unicodedata.unidata_version}")
    out = tmp_path / "unicode_tables.cpp"
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_tables.py"), "--out", str(out)],
                   check=True, capture_output=True)
    strip_python_version = lambda text: re.sub(r"from Python [0-9.]+'s", "", text)
    assert strip_python_version(out.read_text(encoding="utf-8")) == \
        strip_python_version(TABLES.read_text(encoding="utf-8")), \
        "unicode_tables.cpp is stale: rerun scripts/gen_unicode_tables.py"
