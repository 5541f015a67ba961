"""The rule engine: runs the rule files of :mod:`.rules` over one parsed log.

It reproduces the official checker's evaluation so the verdicts agree:

* rule files run one after another from a FIFO queue (``common`` first; a
  state update may queue more), each with fresh state, each re-reading the
  whole log in file order; records whose key has no rule are skipped;
* for ``submission_*`` keys only the first occurrence in a rule file is
  checked, later ones are only counted;
* an ``EXACTLY_ONE`` key seen several times with equal values is only a
  warning (an error with ``werror``); with differing values, or never seen, an
  error;
* errors tied to a key are forgotten when a later rule file has a rule for
  that key (a later file *redefines* the key), others accumulate;
* the "at least one line must satisfy" test and a missing rule file stop the
  official checker with an exception; we record that as a failing finding
  flagged ``official_crash`` and stop too;
* the log passes iff no error remains.

Findings carry the file, the physical line, the key, the rule and a fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Any, Dict, List, Optional

from ..mllog_parse import ParsedLog, Record, parse_log
from . import rules as R

MAX_SHOWN = 160
MAX_RUNS_PER_FILE = 8


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def _excerpt(text: str) -> str:
    return text if len(text) <= 2 * MAX_SHOWN else text[:2 * MAX_SHOWN] + "..."


@dataclass
class Finding:
    severity: str                # "error" or "warning"
    message: str
    file: str
    rule: str
    line: Optional[int] = None   # 1-based physical line, when one line is to blame
    key: Optional[str] = None
    fix: str = ""
    lines: List[int] = field(default_factory=list)   # other lines involved
    text: Optional[str] = None   # the offending log line
    official_crash: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        head = f"{where}: {self.severity}: [{self.rule}]"
        if self.key is not None:
            head += f" {self.key}:"
        out = [f"{head} {self.message}"]
        if self.lines and not self.line:
            shown = ", ".join(str(n) for n in self.lines[:10])
            out.append(f"    lines: {shown}{' ...' if len(self.lines) > 10 else ''}")
        if self.text:
            out.append(f"    | {_excerpt(self.text)}")
        if self.official_crash:
            out.append("    note: the official checker stops with a Python exception here")
        if self.fix:
            out.append(f"    fix: {self.fix}")
        return "\n".join(out)


@dataclass
class LogResult:
    """Verdict and findings for one log under one ruleset."""

    file: str
    ruleset: str
    passed: bool
    official_crash: bool
    findings: List[Finding]
    rule_files: List[str]
    division: Any = None
    benchmark: Any = None
    records: int = 0

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "file": self.file, "ruleset": self.ruleset, "passed": self.passed,
            "official_crash": self.official_crash, "rule_files": self.rule_files,
            "division": self.division if isinstance(self.division, (str, type(None))) else repr(self.division),
            "benchmark": self.benchmark if isinstance(self.benchmark, (str, type(None))) else repr(self.benchmark),
            "records": self.records,
            "findings": [f.to_dict() for f in self.findings],
        }


class _Stop(Exception):
    """Raised where the official checker would die with an exception."""


class _Store:
    """Error bookkeeping with the official overwrite rules (see module doc)."""

    def __init__(self, werror: bool):
        self.werror = werror
        self.keyed: Dict[str, List[Finding]] = {}
        self.unkeyed: List[Finding] = []
        self.warnings: Dict[str, Finding] = {}

    def forget(self, keys) -> None:
        for key in keys:
            self.keyed.pop(key, None)

    def error(self, finding: Finding, key: Optional[str]) -> None:
        finding.severity = "error"
        if key is None:
            self.unkeyed.append(finding)
        else:
            self.keyed.setdefault(key, []).append(finding)

    def warn(self, finding: Finding, key: str) -> None:
        if self.werror:
            self.error(finding, key)
        else:
            finding.severity = "warning"
            self.warnings[key] = finding

    def failed(self) -> bool:
        return bool(self.unkeyed) or any(self.keyed.values())

    def all(self) -> List[Finding]:
        out = list(self.unkeyed)
        for items in self.keyed.values():
            out.extend(items)
        out.extend(self.warnings.values())
        out.sort(key=lambda f: (f.severity != "error", f.line or 0))
        return out


_RULESET_CACHE: Dict[str, Dict[str, R.RuleFile]] = {}


def ruleset_files(version: str) -> Dict[str, R.RuleFile]:
    if version not in _RULESET_CACHE:
        _RULESET_CACHE[version] = R.build_ruleset(version)
    return _RULESET_CACHE[version]


class _Run:
    def __init__(self, parsed: ParsedLog, version: str, werror: bool):
        self.parsed = parsed
        self.version = version
        self.files = ruleset_files(version)
        self.store = _Store(werror)
        self.crashed = False
        self.processed: List[str] = []
        self.division = None
        self.benchmark = None

    # -- helpers -------------------------------------------------------------------
    def rule_name(self, rf: R.RuleFile, key: Optional[str], rule_id: str) -> str:
        parts = [self.version, rf.name]
        if key:
            parts.append(key)
        return "/".join(parts) + f":{rule_id}"

    def crash(self, finding: Finding) -> None:
        finding.official_crash = True
        self.store.error(finding, None)
        self.crashed = True
        raise _Stop()

    # -- one rule file -------------------------------------------------------------
    def run_file(self, rf: R.RuleFile, queue: List[str]) -> None:
        path = self.parsed.source
        s: Dict[str, Any] = {}
        if rf.begin:
            rf.begin(s)
        keymap = rf.key_map()
        self.store.forget(keymap)
        seen: Dict[str, List[Record]] = {k: [] for k in keymap}
        checked_once = set()
        satisfied: Dict[str, List[Any]] = {}

        for rec in self.parsed.records:
            key = rec.key
            if not isinstance(key, str):
                continue
            rule = keymap.get(key)
            if rule is None:
                continue
            seen[key].append(rec)
            v, md = rec.value, rec.raw_metadata
            if key not in checked_once:
                for check in rule.checks:
                    try:
                        ok = check.test(v, md, rec, s)
                        problem = None if ok else check.text
                    except Exception as exc:  # as the official checker: a raising check fails
                        problem = (f"{check.text}, but checking it failed with "
                                   f"{type(exc).__name__}: {exc}")
                    if problem:
                        fix = check.fix
                        if check.rule_id == "init-budget" and s.get("compile_time_mins") == 0:
                            problem += ("; submission_division had not been logged before this line, "
                                        "so the budget was 0")
                        elif check.rule_id == "init-budget":
                            took = (rec.time_ms - s["first_init_start"]) / 60000.0
                            problem += f"; initialisation took {took:.2f} min, budget {s['compile_time_mins']} min"
                        self.store.error(Finding(
                            "error", problem, path, self.rule_name(rf, key, check.rule_id),
                            line=rec.line, key=key, fix=fix, text=rec.text), key)
                if rule.post:
                    try:
                        queued = rule.post(v, md, rec, s)
                        if queued:
                            queue.extend(queued)
                            if key == "submission_division":
                                self.division = v
                            elif key == "submission_benchmark":
                                self.benchmark = v
                    except Exception as exc:
                        self.store.error(Finding(
                            "error",
                            f"could not record this line ({type(exc).__name__}: {exc}); metadata {_short(md)}",
                            path, self.rule_name(rf, key, "state-update"), line=rec.line, key=key,
                            fix=rule.checks[0].fix if rule.checks else "", text=rec.text), key)
            if rule.at_least_one is not None:
                entry = satisfied.setdefault(key, [0, rule.at_least_one, rec])
                try:
                    if rule.at_least_one.test(v, md, rec, s):
                        entry[0] += 1
                except Exception as exc:
                    self.crash(Finding(
                        "error",
                        f"{rule.at_least_one.text}, but the value {_short(v)} cannot be compared "
                        f"({type(exc).__name__}: {exc})",
                        path, self.rule_name(rf, key, rule.at_least_one.rule_id), line=rec.line,
                        key=key, fix="log the accuracy as a number", text=rec.text))
            if "submission_" in key:
                checked_once.add(key)

        for key, (count, check, first) in satisfied.items():
            if count == 0:
                vals = [r.value for r in seen[key]]
                best = None
                try:
                    best = max(vals)
                except Exception:
                    pass
                self.store.error(Finding(
                    "error",
                    f"{check.text}; none of the {len(vals)} lines does"
                    + (f" (best {best!r})" if best is not None else ""),
                    path, self.rule_name(rf, key, check.rule_id), key=key, fix=check.fix,
                    lines=[r.line for r in seen[key]]), None)

        groups = []
        for key, rule in keymap.items():
            recs = seen[key]
            n = len(recs)
            if rule.req == R.EXACTLY_ONE and n != 1:
                vals = [r.value for r in recs]
                if vals and vals.count(vals[0]) == len(vals):
                    self.store.warn(Finding(
                        "warning", f"required exactly once, found {n} times (all with value {_short(vals[0])})",
                        path, self.rule_name(rf, key, "exactly-one"), key=key,
                        fix=f"log {key} once (from one rank)", lines=[r.line for r in recs]), key)
                else:
                    if n == 0:
                        msg = "required exactly once, but not found"
                        fix = rule.req_fix
                        if key == "opt_lamb_epsilon" and any(r.key == "opt_epsilon" for r in self.parsed.records):
                            msg += " (the log has opt_epsilon, the name these rules no longer accept)"
                            fix = "also log opt_lamb_epsilon with the same value as opt_epsilon"
                    else:
                        distinct = []
                        for val in vals:
                            if not any(val == d for d in distinct):
                                distinct.append(val)
                        msg = (f"required exactly once, found {n} times with different values: "
                               + ", ".join(_short(x) for x in distinct[:6]))
                        fix = f"log {key} once, from one rank, with one value"
                    self.store.error(Finding("error", msg, path, self.rule_name(rf, key, "exactly-one"),
                                             key=key, fix=fix, lines=[r.line for r in recs]), key)
            elif rule.req == R.AT_LEAST_ONE and n < 1:
                self.store.error(Finding("error", "required at least once, but not found", path,
                                         self.rule_name(rf, key, "at-least-one"), key=key,
                                         fix=rule.req_fix), key)
            elif rule.req == R.AT_LEAST_ONE_OR:
                group = frozenset((key,) + rule.alternatives)
                if group not in groups:
                    groups.append(group)
        for group in groups:
            if not any(seen[k] for k in group):
                names = sorted(group)
                self.store.error(Finding(
                    "error", "none of " + " or ".join(repr(k) for k in names) + " appears",
                    path, self.rule_name(rf, None, "at-least-one-of"), key=None,
                    fix=keymap[names[0]].req_fix), None)

        for check in rf.end:
            try:
                ok = check.test(s)
                problem = None if ok else check.text + (
                    f" ({check.explain(s)})" if check.explain else "")
            except Exception as exc:
                problem = f"{check.text}, but checking it failed with {type(exc).__name__}: {exc}"
            if problem:
                self.store.error(Finding("error", problem, path,
                                         self.rule_name(rf, None, check.rule_id), fix=check.fix), None)

    # -- whole log -----------------------------------------------------------------
    def run(self) -> None:
        path = self.parsed.source
        for err in self.parsed.errors:
            finding = Finding("error", err.message, path, f"{self.version}/parse:{err.kind}",
                              line=err.line, text=err.text,
                              fix="write each event as ':::MLLOG ' followed by one JSON object with "
                                  "namespace, time_ms, event_type, key, value and metadata")
            if err.official_crash:
                self.crash(finding)
            self.store.error(finding, None)
        if not self.parsed.records:
            self.store.error(Finding("error", "no ':::MLLOG ' lines found", path,
                                     f"{self.version}/parse:no-records",
                                     fix="check that this is an MLPerf log (lines start with ':::MLLOG ')"),
                             None)
        queue = ["common"]
        others = set(R.other_benchmarks(self.version))
        while queue:
            name = queue.pop(0)
            rf = self.files.get(name)
            if rf is None:
                division, _, bench = name.partition("_")
                if division in R.DIVISIONS and bench in others:
                    # The official checker would go on with that benchmark's rules.
                    self.store.error(Finding(
                        "error", f"submission_benchmark is {bench!r}; this checker has BERT rules only",
                        path, f"{self.version}/{division}_common:submission_benchmark:bert-only",
                        key="submission_benchmark",
                        fix="check non-BERT logs with the official mlperf_logging checker"), None)
                    continue
                self.crash(Finding(
                    "error", f"the value selects rule file {name!r}, which does not exist in ruleset "
                             f"{self.version}", path, f"{self.version}/queue:missing-rule-file",
                    fix="use a valid submission_division (closed/open) and submission_benchmark (bert)"))
            self.processed.append(name)
            if self.processed.count(name) > MAX_RUNS_PER_FILE:
                # e.g. submission_benchmark "common" re-queues closed_common forever.
                self.crash(Finding(
                    "error", f"rule file {name!r} keeps queueing itself; the official checker never "
                             "finishes on this log", path, f"{self.version}/queue:loop",
                    fix="use a valid submission_division (closed/open) and submission_benchmark (bert)"))
            self.run_file(rf, queue)


def check_parsed(parsed: ParsedLog, ruleset: str, werror: bool = False) -> LogResult:
    """Check an already parsed log under one ruleset."""
    run = _Run(parsed, ruleset, werror)
    try:
        run.run()
    except _Stop:
        pass
    return LogResult(
        file=parsed.source, ruleset=ruleset,
        passed=not run.crashed and not run.store.failed(),
        official_crash=run.crashed, findings=run.store.all(), rule_files=run.processed,
        division=run.division, benchmark=run.benchmark, records=len(parsed.records))


def check_log(source, ruleset: str, werror: bool = False) -> LogResult:
    """Check one log (path, bytes or text) under one ruleset; never raises for bad content.

    An unreadable path gives a failing result with one finding.
    """
    try:
        parsed = parse_log(source)
    except OSError as exc:
        name = str(source) if not isinstance(source, bytes) else "<bytes>"
        finding = Finding("error", f"cannot read the log: {exc.strerror or exc}", name,
                          f"{ruleset}/input:unreadable", fix="pass a readable log file")
        return LogResult(name, ruleset, False, True, [finding], [])
    return check_parsed(parsed, ruleset, werror)
