"""cmake/build_provenance.cmake, which the build runs every time: the commit the sources come from and
whether they differ from it, in a header rewritten only when that changes. Checked against git itself
on scratch repositories, on this repository's own `git archive` (export-subst fills in
cmake/archive_commit.txt), and on sources that are neither."""
import io
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from bertperf_paths import REPO

SCRIPT = REPO / "cmake" / "build_provenance.cmake"

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("git") is None,
                                reason="needs cmake and git")


def generate(source, header):
    subprocess.run(["cmake", f"-DSOURCE_DIR={source}", "-DVERSION=9.8.7", f"-DOUTPUT={header}", "-P", str(SCRIPT)],
                   check=True, capture_output=True, timeout=120)
    text = header.read_text()
    defines = dict(re.findall(r"#define (\w+) (.*)", text))
    return {"commit": defines["BERTPERF_BUILD_COMMIT"].strip('"'), "dirty": defines["BERTPERF_BUILD_DIRTY"] == "1",
            "source": defines["BERTPERF_BUILD_SOURCE"].strip('"'), "version": defines["BERTPERF_VERSION"].strip('"')}


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_checkout_names_head_and_says_when_it_differs(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet")
    (repo / "a.cpp").write_text("int a;\n")
    (repo / ".gitignore").write_text("/build/\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "one")
    header = tmp_path / "build_provenance.h"
    assert generate(repo, header) == {"commit": git(repo, "rev-parse", "HEAD"), "dirty": False, "source": "git",
                                      "version": "9.8.7"}

    # Nothing changed: the header is not rewritten, so nothing recompiles.
    os.utime(header, (1_000_000_000, 1_000_000_000))
    generate(repo, header)
    assert header.stat().st_mtime == 1_000_000_000

    (repo / "build").mkdir()
    (repo / "build" / "x.o").write_text("ignored")
    assert not generate(repo, header)["dirty"]          # ignored files do not count
    (repo / "results" / "set").mkdir(parents=True)
    (repo / "results" / "set" / "result_0.txt").write_text("a run's log")
    assert not generate(repo, header)["dirty"]          # nor does a result set a run just wrote
    (repo / "b.cpp").write_text("int b;\n")
    assert generate(repo, header)["dirty"]              # a new source file does
    (repo / "b.cpp").unlink()
    (repo / "a.cpp").write_text("int a = 1;\n")
    assert generate(repo, header)["dirty"]              # so does an edit
    assert header.stat().st_mtime != 1_000_000_000

    git(repo, "commit", "--quiet", "-am", "two")
    after = generate(repo, header)
    assert after["commit"] == git(repo, "rev-parse", "HEAD") and not after["dirty"]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_this_repositorys_archive_names_its_commit(tmp_path):
    """A submission's code is `git archive` of the commit: a build of it logs that commit, also when it is
    unpacked inside another repository (the submission repository)."""
    head = git(REPO, "rev-parse", "HEAD")
    if "export-subst" not in git(REPO, "check-attr", "export-subst", "cmake/archive_commit.txt"):
        pytest.skip("this commit predates the export-subst attribute")
    data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD", "cmake"], check=True,
                          capture_output=True).stdout
    outer = tmp_path / "submission"
    outer.mkdir()
    git(outer, "init", "--quiet")
    for where in (tmp_path / "plain", outer / "org" / "code"):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(where)
        assert (where / "cmake" / "archive_commit.txt").read_text().strip() == head
        assert generate(where, tmp_path / "h.h") == {"commit": head, "dirty": False, "source": "archive",
                                                     "version": "9.8.7"}


def test_sources_outside_git_are_unknown_and_dirty(tmp_path):
    source = tmp_path / "src"
    (source / "cmake").mkdir(parents=True)
    (source / "cmake" / "archive_commit.txt").write_text("$Format:%H$\n")  # a copy, not an archive
    info = generate(source, tmp_path / "h.h")
    assert info["commit"] == "unknown" and info["dirty"] and info["source"] == "unknown"
