"""Command line of ``bertperf-package`` (the package's docstring says what it makes and checks).

    bertperf-package --submitter ORG --implementation NAME --out DIR [--ruleset 5.0.0]
                     [--config SYSTEM=PATH ...] [--rcp-reference FILE] [--allow-dirty]
                     [--legacy-logs COMMIT] [--repo DIR] [--bertperf PATH] TREE [TREE ...]

Exit status: 0 when the submitter tree ``DIR/ORG`` was written and passed every check; 1 when a
check refused it (each problem one line naming the file and the fix; nothing is written); 2 for
bad command-line input.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional

from .. import __version__
from ..check import cli as check_cli
from ..check import rcp, rules
from ..check.package import BENCHMARK_RUNS, _params, check_system_description
from ..mllog_parse import parse_file
from ..report.runs import TARGET_ACCURACY
from . import code, official, readme
from .runs import BENCHMARK, SystemRuns, config_lines, read_tree

PROG = "bertperf-package"
DEFAULT_RULESET = "5.0.0"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # folder names the repository checker accepts


class UsageError(Exception):
    pass


@dataclass
class Problem:
    """One reason to refuse: rendered as one line, ``FILE[:LINE]: what (fix: how)``."""

    file: str
    message: str
    fix: str
    line: Optional[int] = None

    def render(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{PROG}: {where}: {self.message} (fix: {self.fix})"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Package result sets of `bertperf run` as an MLPerf submitter tree: "
                                       "the code of the runs' commit, the results and the system descriptions, "
                                       "checked as MLCommons checks them.")
    p.add_argument("trees", nargs="+", metavar="TREE",
                   help="a result tree of `bertperf run` (systems/ and results/<system>/bert/)")
    p.add_argument("--submitter", required=True, help="the submitting organisation: the tree's top folder, "
                   "and the \"submitter\" of every system description")
    p.add_argument("--implementation", required=True, metavar="NAME",
                   help="the implementation's folder: benchmarks/bert/implementations/NAME")
    p.add_argument("--out", required=True, metavar="DIR", help="where the submitter tree DIR/ORG is written")
    p.add_argument("--ruleset", default=DEFAULT_RULESET,
                   help=f"MLPerf Training ruleset: {', '.join(rules.RULESETS)} (default {DEFAULT_RULESET})")
    p.add_argument("--config", action="append", default=[], metavar="SYSTEM=PATH",
                   help="the config SYSTEM's runs trained with, as a path in the repository (default: the path "
                        "the runs log); needed for logs that name none")
    p.add_argument("--rcp-reference", metavar="FILE",
                   help="check convergence against these reference runs (bertperf-check --rcp-reference), "
                        "as scripts/mini.sh does for the mini benchmark")
    p.add_argument("--allow-dirty", action="store_true",
                   help="package runs built from sources with uncommitted changes (the README says so)")
    p.add_argument("--legacy-logs", metavar="COMMIT",
                   help="logs written before runs logged their commit (no bertperf_commit line) are packaged "
                        "with the code of COMMIT, which the packager vouches for (the README says so)")
    p.add_argument("--repo", default=".", metavar="DIR",
                   help="the git repository the code is taken from (default: the one holding the current "
                        "directory)")
    p.add_argument("--bertperf", metavar="PATH",
                   help="the bertperf executable that reads the configs' hyperparameters (`run-once "
                        "--dry-run`; default: build/bin/bertperf of the repository)")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


def _short(commit: Optional[str]) -> str:
    return (commit or "?")[:12]


def _parse_configs(items: List[str]) -> Dict[str, str]:
    out = {}
    for item in items:
        system, sep, path = item.partition("=")
        if not sep or not system or not path:
            raise UsageError(f"--config {item!r}: write SYSTEM=PATH, e.g. cpu_2c=benchmarks/bert/mini/cpu_2c.json")
        out[system] = path
    return out


def _in_repository(path: str, repo: str) -> Optional[str]:
    """``path`` (absolute, or relative to the current directory) as a path inside ``repo``, if it is one."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(repo))
    return None if rel.startswith("..") or os.path.isabs(rel) else rel.replace(os.sep, "/")


class Packager:
    def __init__(self, args, repo: str):
        self.args = args
        self.repo = repo
        self.ruleset = args.ruleset
        self.problems: List[Problem] = []
        self.systems: List[SystemRuns] = []
        self.commit: Optional[str] = None
        self.dirty = False
        self.legacy: List[str] = []      # runs packaged under --legacy-logs
        self.configs: Dict[str, str] = {}  # system -> path in the commit
        self.bad_descriptions: set = set()  # systems whose description is refused (their dry run would fail too)
        self.rcp_record = None

    def refuse(self, file: str, message: str, fix: str, line: Optional[int] = None) -> None:
        self.problems.append(Problem(file, message, fix, line))

    # ---- inputs ----------------------------------------------------------------------------

    def read_trees(self) -> None:
        owner: Dict[str, str] = {}
        for tree in self.args.trees:
            found = read_tree(tree)
            if not found:
                self.refuse(tree, "no results/<system>/bert/ here",
                            "pass result trees written by `bertperf run` (systems/ and results/)")
            for s in found:
                if s.system in owner:
                    self.refuse(s.directory, f"system {s.system} also has results in {owner[s.system]}",
                                "package one result set per system")
                    continue
                owner[s.system] = s.tree
                self.systems.append(s)

    # ---- checks before anything is written ----------------------------------------------------

    def check_provenance(self) -> None:
        legacy = None
        if self.args.legacy_logs:
            legacy = code.resolve_commit(self.repo, self.args.legacy_logs)
            if legacy is None:
                raise UsageError(f"--legacy-logs {self.args.legacy_logs}: not a commit of the repository "
                                 f"{self.repo}")
        commits: Dict[str, List] = collections.OrderedDict()
        for s in self.systems:
            if not s.runs:
                self.refuse(s.directory, "holds no result_*.txt", "run the result set with `bertperf run`")
            for run in s.runs:
                if run.parse_error:
                    line, _, message = run.parse_error.partition(": ")
                    self.refuse(run.path, f"unreadable MLLOG line: {message}", "rerun it; logs are "
                                "packaged unchanged", line=int(line))
                commit = run.commit
                if commit is None:
                    if legacy is None:
                        self.refuse(run.path, "the log names no bertperf commit (it was written before runs "
                                    "logged their commit)", "rerun it with this build, or pass --legacy-logs "
                                    "COMMIT to package it with the code of COMMIT")
                        continue
                    commit = legacy
                    self.legacy.append(run.path)
                elif commit == "unknown" or not re.fullmatch(r"[0-9a-f]{40}", commit):
                    self.refuse(run.path, f"built from sources outside git (commit {commit!r}): there is no "
                                "commit to package", "build from a git clone and rerun", run.commit_line)
                    continue
                elif run.dirty:
                    self.dirty = True
                    if not self.args.allow_dirty:
                        self.refuse(run.path, f"built from commit {_short(commit)} with uncommitted changes "
                                    "(dirty): the commit is not the code that ran", "commit the changes, "
                                    "rebuild and rerun, or pass --allow-dirty (the README then says so)",
                                    run.commit_line)
                commits.setdefault(commit, []).append(run)
        if not commits:
            return
        # The commit most runs name; every other one is refused by name.
        self.commit = max(commits, key=lambda c: len(commits[c]))
        for commit, runs in commits.items():
            if commit == self.commit:
                continue
            for run in runs:
                self.refuse(run.path, f"built from commit {_short(commit)}, the other runs from "
                            f"{_short(self.commit)}: a package holds the code of one commit",
                            f"rerun it with the build of {_short(self.commit)}, or package it separately",
                            run.commit_line)
        if code.resolve_commit(self.repo, self.commit) != self.commit:
            first = commits[self.commit][0]
            self.refuse(first.path, f"commit {self.commit} is not in the repository {self.repo}",
                        "run bertperf-package in the clone that built the runs (or --repo DIR), or fetch "
                        "the commit", first.commit_line)
            self.commit = None

    def check_systems(self) -> None:
        for s in self.systems:
            if not os.path.isfile(s.description):
                self.refuse(s.description, f"missing: results/{s.system}/ needs its system description",
                            f"put systems/{s.system}.json beside results/ (bertperf run writes it)")
                self.bad_descriptions.add(s.system)
                continue
            verdict = check_system_description(s.description, self.ruleset)
            for finding in verdict.findings:
                self.refuse(s.description, f"{finding.message} (ruleset {self.ruleset})", finding.fix)
                self.bad_descriptions.add(s.system)
            try:
                with open(s.description) as handle:
                    submitter = json.load(handle).get("submitter")
            except (OSError, ValueError, AttributeError):
                continue
            if submitter != self.args.submitter:
                self.refuse(s.description, f"submitter is {submitter!r}, the package's is "
                            f"{self.args.submitter!r}", f"package with --submitter {submitter}, or set "
                            "\"submitter\" in the system description before the runs (they log it as "
                            "submission_org)")

    def check_runs(self) -> None:
        wanted = BENCHMARK_RUNS[BENCHMARK]
        for s in self.systems:
            if s.runs and len(s.runs) < wanted:
                config = next((run.config for run in s.runs if run.config), "CONFIG")
                self.refuse(s.directory, f"{len(s.runs)} runs; ruleset {self.ruleset} wants exactly {wanted} "
                            f"for {BENCHMARK}", f"run the rest into this tree: bertperf run --config {config} "
                            f"--out {s.tree} --runs {wanted} --resume")
            elif len(s.runs) > wanted:
                self.refuse(s.directory, f"{len(s.runs)} runs; ruleset {self.ruleset} wants exactly {wanted} "
                            f"for {BENCHMARK}", f"keep result_0.txt to result_{wanted - 1}.txt: the rules do not "
                            "let a submitter choose runs")
            seen: Dict[int, str] = {}
            for run in s.runs:
                seeds = [v for v in run.seeds if isinstance(v, int) and not isinstance(v, bool)]
                if not seeds:
                    self.refuse(run.path, "logs no integer seed", "rerun it (every run logs the seed it drew)")
                    continue
                if seeds[0] in seen:
                    self.refuse(run.path, f"repeats the seed {seeds[0]} of {seen[seeds[0]]}",
                                "rerun it: every run draws a fresh seed")
                seen.setdefault(seeds[0], run.name)
            division = self._division(s)
            if s.runs and (division == "closed" or self.rcp_record is not None):
                # package_checker_params may bypass a failed RCP check, as the official checker lets it.
                bypass = any("rcp-bypass" in _params(os.path.join(d, "package_checker_params"))
                             for d in (s.directory, os.path.dirname(s.directory)))
                result = rcp.check_directory(s.directory, bypass=bypass, reference=self.rcp_record,
                                             ruleset=self.ruleset)
                if not result.passed:
                    detail = f"; {result.detail}" if result.detail else ""
                    self.refuse(s.directory, f"the RCP check fails: {result.message}{detail}",
                                f"`bertperf-check --ruleset {self.ruleset} {s.tree}` shows the bounds; a set the "
                                "review must judge (no RCP for its batch size) is marked by an rcp-bypass line in "
                                "results/<system>/bert/package_checker_params")

    def _division(self, s: SystemRuns) -> Optional[str]:
        try:
            with open(s.description) as handle:
                return json.load(handle).get("division")
        except (OSError, ValueError, AttributeError):
            return None

    def check_configs(self, code_dir: str, bertperf: Optional[str], scratch: str) -> None:
        """Each system's config at the commit logs what its runs logged (submission fields and
        hyperparameters), as `bertperf run-once --dry-run` of it says."""
        given = _parse_configs(self.args.config)
        for s in self.systems:
            named = sorted({run.config for run in s.runs if run.config})
            path = given.get(s.system)
            if path is not None:
                inside = path if not os.path.isabs(path) else _in_repository(path, self.repo)
                if inside is None:
                    self.refuse(path, "is not in the repository", f"pass --config {s.system}=PATH with the "
                                "config's path in the repository")
                    continue
                path = inside
                if named and named != [path]:
                    self.refuse(s.directory, f"the runs ran {', '.join(named)}, not the --config {path}",
                                f"leave out --config {s.system}=...: the runs name their config")
                    continue
            elif len(named) > 1:
                self.refuse(s.directory, f"the runs name different configs: {', '.join(named)}",
                            "rerun the odd ones with the config of the others")
                continue
            elif not named:
                self.refuse(s.directory, "the runs name no config (they predate the bertperf_config line)",
                            f"pass --config {s.system}=PATH, the path of their config in the repository")
                continue
            else:
                path = named[0]
                if os.path.isabs(path):
                    self.refuse(s.runs[0].path, f"ran the config {path}, which lies outside the repository "
                                "the build came from", "commit the config beside its benchmark in "
                                "benchmarks/bert/, rebuild and rerun with it")
                    continue
            if not os.path.isfile(os.path.join(code_dir, path)):
                self.refuse(path, f"is not in commit {_short(self.commit)}",
                            "commit the config the runs used, rebuild and rerun")
                continue
            named_system = _read_json(os.path.join(code_dir, path)).get("system")
            if named_system != s.system:
                self.refuse(path, f"is the config of system {named_system!r}, not of {s.system!r}",
                            f"pass --config {s.system}=PATH with {s.system}'s config")
                continue
            self.configs[s.system] = path
            if bertperf is None or s.system in self.bad_descriptions:
                continue
            log = os.path.join(scratch, f"dry_run_{s.system}.txt")
            proc = subprocess.run([bertperf, "run-once", "--config", os.path.join(code_dir, path), "--dry-run",
                                   "--log", log, "--seed", "0", "--system-file", s.description],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0 or not os.path.isfile(log):
                why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                self.refuse(path, f"its dry run fails: {why}", "fix the config (or set what it names from "
                            "the environment) and rerun")
                continue
            expected = config_lines(parse_file(log).records)
            for run in s.runs:
                logged = config_lines(run.records)
                for key, want in expected.items():
                    got = logged.get(key)
                    if got is None:
                        self.refuse(run.path, f"logs no {key}, which its config {path} logs",
                                    f"rerun it with the build of commit {_short(self.commit)}")
                    elif not _same_value(got.value, want.value):
                        self.refuse(run.path, f"{key} is {json.dumps(got.value)} here, "
                                    f"{json.dumps(want.value)} in the config {path} at commit "
                                    f"{_short(self.commit)}", "rerun it with the config as committed "
                                    "(a log is packaged as it was written)", got.line)

    # ---- the staged tree ---------------------------------------------------------------------

    def write_results(self, org_dir: str) -> List[str]:
        notes = []
        for s in self.systems:
            bench = os.path.join(org_dir, "results", s.system, BENCHMARK)
            os.makedirs(bench, exist_ok=True)
            for run in s.runs:
                shutil.copyfile(run.path, os.path.join(bench, run.name))
            for other in s.others:
                if os.path.basename(other) == "package_checker_params" and os.path.isfile(other):
                    shutil.copyfile(other, os.path.join(bench, "package_checker_params"))
                else:
                    notes.append(f"left out {other} (a submission's result folder holds the runs only)")
            system_params = os.path.join(os.path.dirname(s.directory), "package_checker_params")
            if os.path.isfile(system_params):
                shutil.copyfile(system_params, os.path.join(os.path.dirname(bench), "package_checker_params"))
            os.makedirs(os.path.join(org_dir, "systems"), exist_ok=True)
            shutil.copyfile(s.description, os.path.join(org_dir, "systems", s.system + ".json"))
        return notes


def _same_value(a, b) -> bool:
    """JSON equality: 1 and 1.0 are one number, true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _bertperf_binary(args, repo: str) -> Optional[str]:
    path = args.bertperf or os.path.join(repo, "build", "bin", "bertperf")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _provenance_note(p: Packager) -> str:
    if p.legacy:
        return ("The logs of these runs predate the `bertperf_commit` line: they were packaged with "
                f"`--legacy-logs`, so commit `{p.commit}` is the packager's word for the code that ran, not "
                "the logs'. The configs' hyperparameters were checked against every log.")
    if p.dirty:
        return (f"**The runs were built from commit `{p.commit}` with uncommitted changes** (packaged with "
                "`--allow-dirty`): `code/` is the commit, not exactly the sources that ran.")
    return ("Every run logs this commit (`bertperf_commit`) and that its sources had no uncommitted changes; "
            "the configs' hyperparameters were checked against every log.")


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.ruleset not in rules.RULESETS:
        raise UsageError(f"unknown ruleset {args.ruleset!r}; choose one of {', '.join(rules.RULESETS)}")
    for what, name in (("--submitter", args.submitter), ("--implementation", args.implementation)):
        if not NAME.match(name):
            raise UsageError(f"{what} {name!r}: use letters, digits and . _ + - (a folder name), not starting "
                             "with a dot")
    for tree in args.trees:
        if not os.path.isdir(os.path.join(tree, "results")):
            raise UsageError(f"{tree}: not a result tree (no results/ folder); pass what `bertperf run --out` "
                             "wrote")
    _parse_configs(args.config)
    repo = code.repository_root(args.repo)
    if repo is None:
        raise UsageError(f"{args.repo} is not in a git repository: run {PROG} in the clone that built the runs, "
                         "or pass --repo DIR")
    final = os.path.join(args.out, args.submitter)
    if os.path.exists(final):
        raise UsageError(f"{final} exists already; choose another --out or remove it")

    p = Packager(args, repo)
    if args.rcp_reference:
        try:
            p.rcp_record = rcp.read_reference(args.rcp_reference)
        except rcp.RcpReferenceError as exc:
            raise UsageError(str(exc))
    p.read_trees()
    p.check_provenance()
    p.check_systems()
    p.check_runs()
    bertperf = _bertperf_binary(args, repo)
    if bertperf is None:
        p.refuse(args.bertperf or os.path.join(repo, "build", "bin", "bertperf"),
                 "no bertperf executable here to read the configs' hyperparameters",
                 "build it (scripts/build.sh) or pass --bertperf PATH")

    os.makedirs(args.out, exist_ok=True)
    # Absolute: the official tools run in working directories of their own.
    stage = os.path.abspath(tempfile.mkdtemp(prefix=f".{args.submitter}-staging-", dir=args.out))
    try:
        return _stage_check_and_move(p, args, repo, bertperf, stage, final)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _stage_check_and_move(p: Packager, args, repo: str, bertperf: Optional[str], stage: str, final: str) -> int:
    org_dir = os.path.join(stage, args.submitter)
    impl_dir = os.path.join(org_dir, "benchmarks", BENCHMARK, "implementations", args.implementation)
    code_dir = os.path.join(impl_dir, "code")
    scratch = os.path.join(stage, "scratch")
    os.makedirs(scratch)
    left_out: List[str] = []
    if p.commit is not None:
        left_out = code.archive(repo, p.commit, code_dir)
        p.check_configs(code_dir, bertperf, scratch)
    if p.problems:
        for problem in p.problems:
            print(problem.render(), file=sys.stderr)
        print(f"{PROG}: refused ({len(p.problems)} problem{'s' if len(p.problems) != 1 else ''}); nothing "
              "written", file=sys.stderr)
        return 1

    print(f"{PROG}: commit {p.commit}; configs: "
          + ", ".join(f"{s} {c}" for s, c in sorted(p.configs.items()))
          + f"; read by {subprocess.run([bertperf, '--version'], capture_output=True, text=True).stdout.strip()}")
    for note in p.write_results(org_dir):
        print(f"{PROG}: {note}")

    # The checks MLCommons runs, on the staged tree; a failure leaves nothing behind.
    checks: List[str] = []
    failed = False
    print(f"\n== bertperf-check (ruleset {args.ruleset})")
    check_args = ["--ruleset", args.ruleset] + (["--rcp-reference", args.rcp_reference] if args.rcp_reference
                                                else []) + [org_dir]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        verdict = check_cli.main(check_args)
    print(buffer.getvalue().replace(stage + os.sep, ""), end="")
    checks.append(f"`bertperf-check --ruleset {args.ruleset}"
                  + (" --rcp-reference REFERENCE" if args.rcp_reference else "") + "`: "
                  + ("pass" if verdict == 0 else "FAIL"))
    failed |= verdict != 0

    rows = []
    version = official.installed_version()
    if version is None:
        print("\n== official checkers: mlperf-logging is not installed (requirements.txt pins it); skipped")
    else:
        tools = [official.package_checker, official.repo_checker]
        if official.summarizer_available():
            tools.append(official.result_summarizer)
        else:
            print("\n== official result summarizer: needs pandas and PyYAML; skipped")
        for tool in tools:
            workdir = tempfile.mkdtemp(dir=scratch)
            result = tool(org_dir, args.ruleset, workdir)
            print(f"\n== {result.name} (mlperf-logging {version}): {'PASS' if result.passed else 'FAIL'}")
            for line in result.lines:
                print("  " + line.replace(stage + os.sep, ""))
            checks.append(f"{result.name} (mlperf-logging {version}, ruleset {args.ruleset}): "
                          + ("pass" if result.passed else "FAIL"))
            failed |= not result.passed
            rows = result.rows or rows
    source = "the official result summarizer"
    if not rows:
        targets = {s.system: _target(code_dir, p.configs.get(s.system)) for s in p.systems}
        rows = readme.rows_from_reporter(org_dir, targets, args.ruleset)
        source = "bertperf-report (its scores equal the summarizer's)"
    page = readme.results_page(rows)
    print(f"\n== score as the results page shows it (ruleset {args.ruleset}, minutes; from {source})\n")
    print(page)
    if failed:
        print(f"{PROG}: refused: the package fails the checks above; nothing written", file=sys.stderr)
        return 1

    entries = []
    for s in p.systems:
        config_path = os.path.join(code_dir, p.configs[s.system])
        entries.append(readme.SystemEntry(s.system, p.configs[s.system], _read_json(config_path),
                                          p._division(s) or "", len(s.runs), s.runs[-1].versions,
                                          _read_json(os.path.join(os.path.dirname(config_path), "benchmark.json"))))
    reference = None
    if args.rcp_reference:
        reference = _in_repository(args.rcp_reference, repo) or os.path.basename(args.rcp_reference)
    with open(os.path.join(os.path.dirname(code_dir), "README.md"), "w") as handle:
        handle.write(readme.readme(args.submitter, args.implementation, p.commit, _provenance_note(p), left_out,
                                   entries, args.ruleset, page, checks, reference))
    shutil.rmtree(scratch)
    os.replace(org_dir, final)
    print(f"{PROG}: wrote {final}")
    return 0


def _read_json(path: str) -> dict:
    try:
        with open(path) as handle:
            doc = json.load(handle)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _target(code_dir: str, config: Optional[str]) -> float:
    """The target accuracy of a config's benchmark (benchmark.json beside it)."""
    if config is None:
        return TARGET_ACCURACY
    bench = _read_json(os.path.join(code_dir, os.path.dirname(config), "benchmark.json"))
    return float(bench.get("target_accuracy", TARGET_ACCURACY))


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return run(argv)
    except UsageError as exc:
        print(f"{PROG}: usage error: {exc} (see {PROG} --help)", file=sys.stderr)
        return 2
    except (code.GitError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
