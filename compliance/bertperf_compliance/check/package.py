"""Submission-tree checks: layout, system descriptions, seeds, and the per-directory
compliance and RCP checks, with the official package checker's verdict.

A submission tree is ``<org>/systems/<system>.json`` plus
``<org>/results/<system>/<benchmark>/result_<i>.txt``.  The tree passes when

* every ``systems/*.json`` has the 33 required fields (and, from ruleset 4.0.0
  on, an allowed ``status`` word);
* every benchmark directory the ruleset knows holds exactly the required
  number of ``result_*.txt`` files (10 for BERT), at most one of which fails
  compliance;
* in the closed division, every run logs a seed, no two runs log the same seed
  from the same source line, and the RCP check passes (unless bypassed by a
  flag or a ``package_checker_params`` line).

Where the official package checker would stop with an exception (a missing
system description, a log line that crashes its compliance checker, ...), the
tree fails and the finding says so.  Trees with power logs or non-BERT
benchmarks are reported as such: this package has BERT rules only.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..mllog_parse import parse_file
from . import rcp as rcp_mod
from .engine import Finding, LogResult, check_log

BENCHMARK_RUNS = {"bert": 10}

# Benchmark directory names each ruleset knows (others are skipped with a warning).
ALLOWED_BENCHMARKS = {
    "1.1": ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d"),
    "2.0": ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d"),
    "2.1": ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d"),
    "3.0": ("bert", "dlrm_dcnv2", "gpt3", "maskrcnn", "resnet", "ssd", "rnnt", "unet3d"),
    "3.1": ("bert", "dlrm_dcnv2", "gpt3", "maskrcnn", "resnet", "ssd", "rnnt", "unet3d",
            "stable_diffusion"),
    "4.0": ("bert", "dlrm_dcnv2", "gpt3", "resnet", "ssd", "unet3d", "stable_diffusion",
            "llama2_70b_lora", "gnn"),
    "4.1": ("bert", "dlrm_dcnv2", "gpt3", "ssd", "stable_diffusion", "llama2_70b_lora", "gnn"),
    "5.0": ("bert", "dlrm_dcnv2", "retinanet", "stable_diffusion", "llama2_70b_lora", "rgat",
            "llama31_405b"),
}

SYSTEM_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes",
    "host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
    "host_processor_vcpu_count", "host_processor_frequency", "host_processor_caches",
    "host_processor_interconnect", "host_memory_capacity", "host_storage_type",
    "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework",
    "other_software_stack", "operating_system", "sw_notes",
)
# Fields the official checker joins into a CSV row, so they must be strings when present.
SYSTEM_STRING_FIELDS = ("submitter", "system_name", "host_processor_model_name",
                        "host_processor_core_count", "accelerator_model_name",
                        "accelerators_per_node", "framework")
STATUS_WORDS_V4 = ("Available on-premise", "Available cloud",
                   "Research, Development, or Internal (RDI)", "Preview")


@dataclass
class CheckResult:
    """Verdict of one tree-level check (system JSON, seeds, a directory, a tree)."""

    name: str
    passed: bool
    findings: List[Finding] = field(default_factory=list)
    official_crash: bool = False
    logs: List[LogResult] = field(default_factory=list)
    rcp: Optional[rcp_mod.RcpResult] = None
    children: List["CheckResult"] = field(default_factory=list)

    def all_findings(self) -> List[Finding]:
        out = list(self.findings)
        for log in self.logs:
            out.extend(log.findings)
        for child in self.children:
            out.extend(child.all_findings())
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name, "passed": self.passed, "official_crash": self.official_crash,
            "findings": [f.to_dict() for f in self.findings],
            "logs": [log.to_dict() for log in self.logs],
            "rcp": self.rcp.to_dict() if self.rcp else None,
            "children": [c.to_dict() for c in self.children],
        }


def _err(file: str, rule: str, message: str, fix: str = "", crash: bool = False, **kw) -> Finding:
    return Finding("error", message, file, rule, fix=fix, official_crash=crash, **kw)


def _warn(file: str, rule: str, message: str, fix: str = "", **kw) -> Finding:
    return Finding("warning", message, file, rule, fix=fix, **kw)


def _short_version(ruleset: str) -> str:
    return ".".join(ruleset.split(".")[:2])


# ------------------------------------------------------------------------------------------
# System description.

def check_system_description(path: str, ruleset: str) -> CheckResult:
    """The 33 required fields and, from ruleset 4.0.0 on, the status word."""
    rule = f"{ruleset}/system-description"
    result = CheckResult(path, True)
    try:
        with open(path, "r") as handle:
            contents = json.load(handle)
    except (OSError, ValueError) as exc:
        result.passed = False
        result.official_crash = True
        result.findings.append(_err(path, rule + ":json", f"cannot read the system description: {exc}",
                                    "write the file as one JSON object", crash=True))
        return result
    if not isinstance(contents, dict):
        result.passed = False
        result.official_crash = True
        result.findings.append(_err(path, rule + ":object",
                                    f"the system description is a JSON {type(contents).__name__}, not an object",
                                    "write the file as one JSON object", crash=True))
        return result
    missing = [f for f in SYSTEM_FIELDS if f not in contents]
    for name in missing:
        result.findings.append(_err(path, rule + ":required-field", f"missing field {name!r}",
                                    f"add \"{name}\" (an empty string is accepted)", key=name))
    if int(ruleset.split(".")[0]) >= 4 and "status" in contents \
            and contents["status"] not in STATUS_WORDS_V4:
        result.findings.append(_err(
            path, rule + ":status", f"status {contents['status']!r} is not one of "
            + ", ".join(repr(w) for w in STATUS_WORDS_V4),
            "use \"Available on-premise\", \"Available cloud\", "
            "\"Research, Development, or Internal (RDI)\" or \"Preview\"", key="status"))
    for name in SYSTEM_STRING_FIELDS:
        if name in contents and not isinstance(contents[name], str):
            result.official_crash = True
            result.findings.append(_err(
                path, rule + ":string-field",
                f"field {name!r} is {contents[name]!r}, not a string; the official checker "
                "stops on it", f"write \"{name}\" as a JSON string", crash=True, key=name))
    result.passed = not result.findings
    return result


# ------------------------------------------------------------------------------------------
# Seeds.

def check_seeds(result_files: List[str], ruleset: str) -> CheckResult:
    """Every run logs an integer seed; no two runs share a (file, line, seed) triple."""
    rule = f"{ruleset}/seeds"
    result = CheckResult("seeds", True)
    owner: Dict[Any, str] = {}
    for path in result_files:
        try:
            parsed = parse_file(path)
        except OSError as exc:
            result.findings.append(_err(path, rule + ":unreadable", f"cannot read: {exc}"))
            continue
        if parsed.errors:
            first = parsed.errors[0]
            result.findings.append(_err(
                path, rule + ":parse", f"seeds cannot be read: the log has {len(parsed.errors)} "
                f"unparsable MLLOG line(s), first: {first.message}", line=first.line,
                fix="fix the log lines first"))
            continue
        triples = []
        bad = None
        for rec in parsed.records:
            if rec.key != "seed":
                continue
            try:
                triples.append((rec.raw_metadata["file"], rec.raw_metadata["lineno"],
                                int(rec.value), rec.line))
            except Exception as exc:
                bad = (rec, exc)
                break
        if bad is not None:
            rec, exc = bad
            result.findings.append(_err(
                path, rule + ":seed-record",
                f"seed line unusable ({type(exc).__name__}: {exc}); value {rec.value!r}",
                "log the seed as an integer with the default file/lineno metadata",
                line=rec.line, key="seed", text=rec.text))
            continue
        if not triples:
            result.findings.append(_err(path, rule + ":no-seed", "the run logs no seed",
                                        "log the run's seed once (key seed, integer value)", key="seed"))
        elif len(triples) > 1:
            result.findings.append(_warn(path, rule + ":several-seeds",
                                         f"the run logs {len(triples)} seeds", key="seed",
                                         lines=[t[3] for t in triples]))
        for src, lineno, seed, line in triples:
            ident = (src, lineno, seed)
            try:
                prior = owner.get(ident)
            except TypeError:
                result.official_crash = True
                result.findings.append(_err(
                    path, rule + ":seed-record", "seed metadata file/lineno is not a plain value; "
                    "the official seed checker stops on it", line=line, key="seed", crash=True))
                continue
            if prior is not None:
                result.findings.append(_err(
                    path, rule + ":unique", f"seed {seed} logged at {src}:{lineno} was already "
                    f"logged there by {prior}", "draw a fresh seed for every run",
                    line=line, key="seed"))
            else:
                owner[ident] = path
    result.passed = not any(f.severity == "error" for f in result.findings)
    return result


# ------------------------------------------------------------------------------------------
# Benchmark directory and whole tree.

def _params(path: str) -> List[str]:
    # Lines are compared with their newline, as the official checker does, so only a
    # last line without a newline can switch a bypass on.
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return handle.readlines()


def check_benchmark_dir(directory: str, ruleset: str, closed: bool, *, werror: bool = False,
                        rcp_bypass: bool = False, rcp_train_samples: bool = False,
                        seed_bypass: bool = False,
                        rcp_reference: Optional[rcp_mod.RcpRecord] = None) -> CheckResult:
    """One ``results/<system>/bert`` directory: file count, compliance, seeds, RCP (against
    ``rcp_reference`` in any division when given)."""
    result = CheckResult(directory, True)
    rule = f"{ruleset}/package"
    result_files = sorted(glob.glob("{folder}/result_*.txt".format(folder=directory), recursive=True))
    all_files = glob.glob("{folder}/*".format(folder=directory), recursive=True)
    params_path = os.path.join(directory, "package_checker_params")
    try:
        lines = _params(params_path)
    except (OSError, UnicodeDecodeError) as exc:
        result.passed = False
        result.official_crash = True
        result.findings.append(_err(params_path, rule + ":params", f"cannot read: {exc}", crash=True))
        return result
    rcp_bypass = rcp_bypass or "rcp-bypass" in lines
    seed_bypass = seed_bypass or "seed-checker-bypass" in lines
    expected = BENCHMARK_RUNS["bert"]
    errors = False
    if len(result_files) != expected:
        errors = True
        result.findings.append(_err(directory, rule + ":run-count",
                                    f"found {len(result_files)} result_*.txt files, expected {expected}",
                                    f"provide exactly {expected} runs named result_0.txt ... "
                                    f"result_{expected - 1}.txt"))
    extra = [f for f in all_files if f not in result_files and f != params_path]
    if extra:
        result.findings.append(_warn(directory, rule + ":unknown-files",
                                     "files not named result_*.txt: "
                                     + ", ".join(os.path.basename(f) for f in sorted(extra)[:5]),
                                     "rename runs to result_<i>.txt or move other files away"))
    if os.path.exists(os.path.join(directory, "power")):
        result.findings.append(_warn(directory, rule + ":power",
                                     "power logs are present; this checker does not check them"))

    failing = []
    for path in result_files:
        log = check_log(path, ruleset, werror=werror)
        result.logs.append(log)
        if log.official_crash:
            result.official_crash = True
            result.findings.append(_err(path, rule + ":compliance-crash",
                                        "the official package checker stops on this log (see its findings)",
                                        crash=True))
            result.passed = False
            return result
        if not log.passed:
            failing.append(path)
    if len(failing) == 1:
        result.findings.append(_warn(failing[0], rule + ":olympic",
                                     "1 run does not comply; accepted under olympic scoring"))
    elif failing:
        errors = True
        result.findings.append(_err(directory, rule + ":compliance",
                                    f"{len(failing)} runs do not comply (at most 1 may): "
                                    + ", ".join(os.path.basename(f) for f in failing),
                                    "fix the runs' findings listed above"))

    if closed and not seed_bypass:
        seeds = check_seeds(result_files, ruleset)
        result.children.append(seeds)
        if seeds.official_crash:
            result.official_crash = True
            result.passed = False
            return result
        if not seeds.passed:
            errors = True
    if closed or rcp_reference is not None:
        rcp_result = rcp_mod.check_directory(directory, use_train_samples=rcp_train_samples,
                                             pruned=True, bypass=rcp_bypass, reference=rcp_reference,
                                             ruleset=ruleset)
        result.rcp = rcp_result
        if rcp_result.official_crash:
            result.official_crash = True
            result.passed = False
            result.findings.append(_err(directory, rule + ":rcp", f"RCP check: {rcp_result.message}",
                                        crash=True))
            return result
        if rcp_result.slower:
            result.findings.append(_warn(
                directory, rule + ":rcp-slower",
                f"converges slower than the reference: olympic mean {rcp_result.submission_mean:,.0f} samples, "
                f"{rcp_result.detail}",
                "MLPerf accepts slower convergence; for an implementation of the same recipe, look for what differs"))
        if not rcp_result.passed:
            errors = True
            detail = f" ({rcp_result.detail})" if rcp_result.detail else ""
            extra_txt = ""
            if rcp_reference is not None:
                extra_txt = (f"; olympic mean {rcp_result.submission_mean:,.0f} samples"
                             if rcp_result.submission_mean is not None else "")
            elif rcp_result.record is not None and rcp_result.submission_mean is not None:
                extra_txt = (f"; olympic mean {rcp_result.submission_mean:.1f} samples, minimum "
                             f"{rcp_result.record.min_mean:.1f} at batch size {rcp_result.bs}")
            result.findings.append(_err(
                directory, rule + ":rcp", f"RCP check failed: {rcp_result.message}{detail}{extra_txt}",
                "check convergence (epoch_num of eval_accuracy = samples), use a batch size with an "
                "RCP, or use rcp bypass / --rcp-bert-train-samples where the rules allow"))
    result.passed = not errors
    return result


def check_package(folder: str, ruleset: str, *, werror: bool = False, rcp_bypass: bool = False,
                  rcp_train_samples: bool = False, seed_bypass: bool = False,
                  rcp_reference: Optional[rcp_mod.RcpRecord] = None) -> CheckResult:
    """A whole submission tree ``<org>/{systems,results}``."""
    tree = CheckResult(folder, True)
    rule = f"{ruleset}/package"
    allowed = ALLOWED_BENCHMARKS.get(_short_version(ruleset), ())
    errors = False

    for path in sorted(glob.glob(os.path.join(folder, "systems", "*.json"))):
        sysres = check_system_description(path, ruleset)
        tree.children.append(sysres)
        if sysres.official_crash:
            tree.official_crash = True
            tree.passed = False
            return tree
        errors = errors or not sysres.passed

    results_dir = os.path.join(folder, "results")
    if not os.path.isdir(results_dir):
        tree.findings.append(_err(folder, rule + ":layout", "no results/ directory",
                                  "put runs under results/<system>/bert/", crash=True))
        tree.official_crash = True
        tree.passed = False
        return tree
    for system_dir in sorted(p for p in (os.path.join(results_dir, n) for n in os.listdir(results_dir))
                             if os.path.isdir(p)):
        system = os.path.basename(system_dir)
        try:
            params = _params(os.path.join(system_dir, "package_checker_params"))
        except (OSError, UnicodeDecodeError) as exc:
            tree.findings.append(_err(system_dir, rule + ":params", f"cannot read params: {exc}", crash=True))
            tree.official_crash = True
            tree.passed = False
            return tree
        sys_rcp_bypass = "rcp-bypass" in params
        sys_seed_bypass = "seed-checker-bypass" in params
        for bench_dir in sorted(p for p in (os.path.join(system_dir, n) for n in os.listdir(system_dir))
                                if os.path.isdir(p)):
            bench = os.path.basename(bench_dir)
            desc_path = os.path.join(folder, "systems", system + ".json")
            try:
                with open(desc_path) as handle:
                    division = json.load(handle)["division"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                tree.findings.append(_err(
                    desc_path, rule + ":system-for-results",
                    f"results/{system}/ needs systems/{system}.json with a division field ({exc})",
                    f"add systems/{system}.json", crash=True))
                tree.official_crash = True
                tree.passed = False
                return tree
            if bench not in allowed:
                tree.findings.append(_warn(bench_dir, rule + ":skip",
                                           f"skipping {bench!r}: not a benchmark of ruleset {ruleset}"))
                continue
            if bench != "bert":
                tree.findings.append(_warn(bench_dir, rule + ":not-bert",
                                           f"not checked: {bench!r} (this checker has BERT rules only)"))
                continue
            sub = check_benchmark_dir(bench_dir, ruleset, division == "closed", werror=werror,
                                      rcp_bypass=rcp_bypass or sys_rcp_bypass,
                                      rcp_train_samples=rcp_train_samples,
                                      seed_bypass=seed_bypass or sys_seed_bypass,
                                      rcp_reference=rcp_reference)
            tree.children.append(sub)
            if sub.official_crash:
                tree.official_crash = True
                tree.passed = False
                return tree
            errors = errors or not sub.passed
    tree.passed = not errors
    return tree
