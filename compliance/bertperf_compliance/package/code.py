"""The code of a submission: the commit the runs name, taken from the repository with ``git``."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from typing import List, Optional


class GitError(Exception):
    """git is missing or refused; the message says what was asked."""


def _git(repo: str, *args: str, binary: bool = False) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=not binary, timeout=300)
    except FileNotFoundError:
        raise GitError("git is not installed")


def repository_root(path: str) -> Optional[str]:
    """The top level of the git repository holding ``path``; None when there is none."""
    proc = _git(path, "rev-parse", "--show-toplevel")
    return proc.stdout.strip() if proc.returncode == 0 else None


def resolve_commit(repo: str, revision: str) -> Optional[str]:
    """The full hash of ``revision`` when it is a commit of ``repo``."""
    proc = _git(repo, "rev-parse", "--verify", "--quiet", revision + "^{commit}")
    return proc.stdout.strip() if proc.returncode == 0 else None


def has_file(repo: str, commit: str, path: str) -> bool:
    return _git(repo, "cat-file", "-e", f"{commit}:{path}").returncode == 0


def hidden(name: str) -> bool:
    """A path with a component starting with '.': the MLCommons repository checker refuses those."""
    return any(part.startswith(".") for part in name.strip("/").split("/") if part not in ("", "."))


def archive(repo: str, commit: str, dest: str) -> List[str]:
    """Writes the tree of ``commit`` into ``dest`` as ``git archive`` exports it (export-subst applied),
    without paths that have a component starting with '.'; returns those left out."""
    proc = _git(repo, "archive", "--format=tar", commit, binary=True)
    if proc.returncode != 0:
        raise GitError(f"git archive {commit} failed: {proc.stderr.decode(errors='replace').strip()}")
    left_out: List[str] = []
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        members = []
        for member in tar.getmembers():
            if member.type == tarfile.XGLTYPE or member.name == "pax_global_header":
                continue
            if hidden(member.name):
                left_out.append(member.name)
                continue
            members.append(member)
        os.makedirs(dest, exist_ok=True)
        try:
            tar.extractall(dest, members=members, filter="tar")
        except TypeError:  # Python before the extraction filters
            tar.extractall(dest, members=members)
    # The top-level names only (".ci/run" goes with ".ci").
    return sorted({name.strip("/").split("/")[0] for name in left_out})
