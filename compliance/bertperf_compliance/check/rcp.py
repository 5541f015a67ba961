"""The RCP (reference convergence point) check for BERT, with the BERT RCP data.

A closed-division BERT submission's olympic-mean samples-to-converge must not be
statistically faster than the reference runs at the same global batch size
(or at an interpolated one).  This module holds the reference data (the same
for rulesets 2.1.0 to 5.0.0; 2.0.0 has an older batch-448 reference, and 1.1.0
also lacks batch sizes 4608 and 16384), derives the per-record statistics, prunes the
set, and judges a directory of ``result_*.txt`` files the way the official
``rcp_checker`` does, including how it reads the logs: by substring tests on
the raw JSON text of each ``:::MLLOG`` line.

The Student-t distribution is computed here (regularised incomplete beta by
continued fraction), so the checker needs nothing outside the standard library.
"""

from __future__ import annotations

import glob
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..mllog_parse import TOKEN

SUBMISSION_RUNS = 10          # BERT runs per submission; the reference has at least twice that
ALPHA = 0.05                  # one-sided significance of "faster than the reference"
SEARCH_TOLERANCE = 1e-4       # samples; width at which the bisection stops
NOT_CONVERGED = 1e9           # samples-to-converge given to a run without a successful run_stop
RCP_RULESETS = ("1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0")
DEFAULT_RULESET = "2.1.0"  # any of 2.1.0 to 5.0.0: their data are the same

# Reference runs: batch size -> (hyperparameters, samples to converge per run).
# Hyperparameter order: opt_base_learning_rate, opt_learning_rate_training_steps,
# num_warmup_steps, start_warmup_step, opt_lamb_beta_1, opt_lamb_beta_2,
# opt_lamb_weight_decay_rate, gradient_accumulation_steps (opt_epsilon is 1e-6 in all).
_HP_NAMES = ("opt_base_learning_rate", "opt_learning_rate_training_steps", "num_warmup_steps",
             "start_warmup_step", "opt_lamb_beta_1", "opt_lamb_beta_2",
             "opt_lamb_weight_decay_rate", "gradient_accumulation_steps")
_BERT_REFERENCE = {
    256: ((0.00035, 13700, 0, 0, 0.9, 0.999, 0.01, 1), (
        2834944, 2508800, 2709504, 2609152, 2383360, 2308096, 2910208, 2333184, 2283008, 2935296,
        2483712, 2558976, 2709504, 2232832, 2333184, 2533888, 2709504, 2257920, 2609152, 2809856)),
    448: ((0.000425, 6700, 0, 0, 0.9, 0.999, 0.01, 1), (
        2132480, 2333184, 2408448, 2483712, 2684416, 2107392, 2157568, 2709504, 2533888, 2584064,
        1981952, 2182656, 2408448, 2433536, 2333184, 2533888, 2458624, 2558976, 2584064, 2358272,
        2358272, 2358272, 2759680)),
    1536: ((0.002, 2254, 0, 0, 0.66, 0.996, 0.01, 1), (
        2836240, 2801664, 2801664, 2727936, 2801664, 2875392, 2899968, 2727936, 2777088, 2875392,
        2777088, 2801664, 2678784, 2801664, 2703360, 2629632, 2727936, 2703360, 2654208, 2949120)),
    3072: ((0.002, 1141, 100, 0, 0.66, 0.998, 0.01, 96), (
        2703360, 2482176, 3072000, 2654208, 2580480, 2727936, 2605056, 2801664, 2777088, 2580480,
        2875392, 2826240, 2973696, 2850816, 2678784, 2919120, 3121152, 2605056, 2678784, 2850816)),
    4096: ((0.0024, 855, 0, 0, 0.66, 0.998, 0.01, 16), (
        2801664, 3022848, 2801664, 3022848, 3047424, 2727936, 2973696, 2703360, 2924544, 2629632,
        2678784, 2850816, 2777088, 2826240, 2801664, 2850816, 2924544, 2924544, 2727936, 2850816)),
    4608: ((0.0035, 700, 0, 0, 0.62, 0.9, 0.01, 144), (
        2626560, 2833920, 2787840, 2949120, 2880000, 2810880, 2880000, 3041280, 2787840, 2833920,
        2741760, 2810880, 2649600, 2718720, 2488320, 2603520, 2833920, 2787840, 2810880, 3018240)),
    6144: ((0.0029293, 700, 0, -700, 0.7206, 0.78921, 0.001, 24), (
        3366912, 3244032, 3219456, 3686400, 3317760, 3293184, 3416064, 3317760, 3391488, 2998272,
        3317760, 3072000, 3416064, 3293184, 3391488, 3514368, 3194880, 3465216, 3244032, 3268608)),
    6912: ((0.0029293, 700, 0, -700, 0.7206, 0.78921, 0.001, 27), (
        3621888, 3677184, 3400704, 3594240, 3483648, 3732480, 3677184, 3797776, 3621888, 3760128,
        3649536, 3483648, 3566592, 3649536, 3621888, 3483648, 3290112, 3704832, 3594240, 3511296)),
    8192: ((0.00288293, 600, 287, -76, 0.88, 0.88, 0.0166629, 16), (
        4251648, 4153344, 4055040, 4177920, 4177920, 4079616, 4276224, 4128768, 4177920, 4153344,
        4177920, 4079616, 4300800, 4153344, 4276224, 4423680, 4276224, 4104192, 4251648, 4153344)),
    8704: ((0.002971656225, 600, 287, -76, 0.88, 0.88, 0.0166629, 34), (
        4343040, 4143360, 4143360, 4442880, 4392960, 4243200, 4193280, 4542720, 4492800, 4243200,
        4243200, 4392960, 4243200, 4193280, 4093440, 4392960, 4093440, 4243200, 4093440, 4392960)),
    12288: ((0.0031, 500, 300, -100, 0.8, 0.925, 0.0166629, 32), (
        4542720, 4392960, 4642560, 4542720, 4542720, 4492800, 4343040, 4343040, 4442880, 4442880,
        4442880, 4442880, 4442880, 4692480, 4492800, 4442880, 4442880, 4442880, 4492800, 4343040)),
    13056: ((0.00319540686, 500, 300, -100, 0.8, 0.925, 0.0166629, 34), (
        4442880, 4592640, 4642560, 4842240, 4742400, 4592640, 4642560, 4692480, 4942080, 4542720,
        4592640, 4093440, 4442880, 4792320, 4642560, 4592640, 4592640, 4892160, 4742400, 4592640)),
    16384: ((0.0033, 600, 290, -100, 0.75, 0.9, 0.0166629, 32), (
        5619712, 5770240, 5720064, 5419008, 5519360, 5569536, 5218304, 5469184, 5419008, 5218304,
        5669888, 5669888, 5519360, 5569536, 5368832, 5469184, 5569536, 5469184, 5368832, 5469184)),
}


# Rulesets 1.1.0 and 2.0.0: the batch-448 reference from before the v1.0 round.
_BERT_448_BEFORE_21 = ((0.0004, 8103, 0, 0, 0.9, 0.999, 0.01, 1), (
    2558976, 2634240, 2885120, 2734592, 3010560, 2383360, 2458624, 2609152, 2558976, 2684416,
    2508800, 2458624, 2684416, 2533888, 2533888, 2784768, 2308096, 2784768, 2584064, 2809856))


def _reference_for(ruleset: str) -> Dict[int, Tuple[tuple, tuple]]:
    if ruleset not in RCP_RULESETS:
        raise KeyError(ruleset)
    data = dict(_BERT_REFERENCE)
    if ruleset in ("1.1.0", "2.0.0"):
        data[448] = _BERT_448_BEFORE_21
    if ruleset == "1.1.0":
        del data[4608], data[16384]
    return data


def reference_records(ruleset: str = DEFAULT_RULESET) -> Dict[int, Dict[str, Any]]:
    """The raw BERT reference data of a ruleset: batch size -> hyperparameters and runs."""
    out = {}
    for bs, (hps, runs) in sorted(_reference_for(ruleset).items()):
        hp = dict(zip(_HP_NAMES, hps))
        hp["opt_epsilon"] = 1e-6
        out[bs] = {"BS": bs, "Hyperparams": hp, "runs": list(runs)}
    return out


# ------------------------------------------------------------------------------------------
# Statistics.

def _betacf(a: float, b: float, x: float) -> float:
    # Continued fraction of the incomplete beta function (modified Lentz).
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def one_sided_p(mean1: float, std1: float, n1: int, mean2: float, std2: float, n2: int) -> float:
    """P-value that sample 1 is smaller, from an equal-variance two-sample t-test."""
    df = n1 + n2 - 2
    pooled = ((n1 - 1) * std1 * std1 + (n2 - 1) * std2 * std2) / df
    t = (mean1 - mean2) / math.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
    two_sided = betainc(df / 2.0, 0.5, df / (df + t * t))
    return two_sided / 2.0 if t < 0 else 1.0 - two_sided / 2.0


def min_acceptable_mean(mean: float, stdev: float, n_ref: int,
                        n_subm: int = SUBMISSION_RUNS - 2) -> float:
    """Smallest submission mean not significantly below ``mean`` (bisection, as the official)."""
    if stdev == 0:
        return mean
    lo, hi = 0.0, mean
    mid = (lo + hi) / 2
    while hi - lo > SEARCH_TOLERANCE:
        if one_sided_p(mid, stdev, n_ref, mean, stdev, n_subm) > ALPHA:
            hi = mid
        else:
            lo = mid
        mid = (lo + hi) / 2
    return mid


def olympic_mean(values: List[float], drop: int = 1) -> float:
    ordered = sorted(values)
    kept = ordered[drop:len(ordered) - drop]
    return math.fsum(kept) / len(kept)


def population_stdev(values: List[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values))


@dataclass
class RcpRecord:
    bs: float
    mean: float
    stdev: float
    min_mean: float
    interpolated: bool = False
    hyperparams: Dict[str, Any] = field(default_factory=dict)
    runs: int = 0

    @property
    def max_speedup(self) -> float:
        return self.mean / self.min_mean

    def to_dict(self) -> Dict[str, Any]:
        return {"bs": self.bs, "mean": self.mean, "stdev": self.stdev,
                "min_acceptable_mean": self.min_mean, "max_speedup": self.max_speedup,
                "interpolated": self.interpolated, "reference_runs": self.runs}


def _interp(bs: float, low: RcpRecord, high: RcpRecord) -> RcpRecord:
    def lin(a: float, b: float) -> float:
        # np.interp's formula, so boundary values agree.
        return (b - a) / (high.bs - low.bs) * (bs - low.bs) + a
    mean = lin(low.mean, high.mean)
    stdev = lin(low.stdev, high.stdev)
    return RcpRecord(bs, mean, stdev, min_acceptable_mean(mean, stdev, 2 * SUBMISSION_RUNS),
                     interpolated=True)


def record_from_runs(bs: float, runs: List[float], hyperparams: Optional[Dict[str, Any]] = None) -> RcpRecord:
    """An RCP from reference runs' samples-to-converge, as the official derives each record."""
    mean = olympic_mean(runs)
    stdev = population_stdev(runs)
    return RcpRecord(bs, mean, stdev, min_acceptable_mean(mean, stdev, len(runs) - 2),
                     hyperparams=dict(hyperparams or {}), runs=len(runs))


_TABLES: Dict[str, Tuple[List[RcpRecord], List[RcpRecord]]] = {}


def rcp_tables(ruleset: str = DEFAULT_RULESET) -> Tuple[List[RcpRecord], List[RcpRecord]]:
    """(all records, pruned records) of a ruleset, both sorted by batch size."""
    if ruleset in _TABLES:
        return _TABLES[ruleset]
    full = [record_from_runs(bs, rec["runs"], rec["Hyperparams"])
            for bs, rec in reference_records(ruleset).items()]
    # Drop everything below the fastest-converging batch size, then drop points that
    # converge slower than the interpolation of their neighbours.
    fastest = min(full, key=lambda r: r.mean)
    kept = [r for r in full if r.bs >= fastest.bs]
    i = 1
    while i < len(kept) - 1:
        if kept[i].mean > _interp(kept[i].bs, kept[i - 1], kept[i + 1]).mean:
            del kept[i]
            i -= 1
        i += 1
    _TABLES[ruleset] = (full, kept)
    return full, kept


# ------------------------------------------------------------------------------------------
# Reading runs the way the official RCP checker does.

class RcpReadError(Exception):
    """The official RCP reader raises on this file; carries file and line."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass
class RunConvergence:
    path: str
    converged: bool
    samples: Any
    bs: Any
    benchmark: Any
    run_stop_line: Optional[int] = None


def read_run(path: str, use_train_samples: bool = False) -> RunConvergence:
    """Samples-to-converge, batch size and benchmark of one log.

    Mirrors the official reader: lines are matched by substring on the JSON
    text, and the samples are those of the last ``eval_accuracy`` (or, with
    ``use_train_samples``, ``train_samples``) line before a successful
    ``run_stop``.  Raises :class:`RcpReadError` where the official reader
    would raise.
    """
    not_converged = True
    samples: Any = NOT_CONVERGED
    bs: Any = -1
    benchmark: Any = None
    conv: Any = None
    have_conv = False
    stop_line = None
    with open(path, "r", encoding="latin-1") as handle:
        lines = handle.readlines()
    for line_no, raw in enumerate(lines, start=1):
        cut = raw.rfind(TOKEN)
        if cut < 0:
            continue
        text = raw[cut:].strip()
        if not text.startswith(TOKEN):
            continue
        body = text[len(TOKEN):]

        def load(what: str):
            try:
                return json.loads(body)
            except Exception as exc:
                raise RcpReadError(path, line_no, f"the line mentions {what} but is not valid JSON ({exc})")

        def member(obj, *names):
            cur = obj
            try:
                for name in names:
                    cur = cur[name]
                return cur
            except Exception as exc:
                raise RcpReadError(path, line_no, f"the line has no {'.'.join(names)} "
                                                  f"({type(exc).__name__}: {exc})")

        if "global_batch_size" in body:
            bs = member(load("global_batch_size"), "value")
        if "submission_benchmark" in body:
            benchmark = member(load("submission_benchmark"), "value")
            if benchmark != "bert" and use_train_samples:
                use_train_samples = False
        if benchmark in _OTHER_READERS and ("eval_error" in body or "eval_accuracy" in body):
            raise RcpReadError(path, line_no, f"benchmark {benchmark!r} is not BERT")
        elif not use_train_samples and ("eval_error" in body or "eval_accuracy" in body):
            epoch = member(load("eval_accuracy"), "metadata", "epoch_num")
            try:
                conv = round(epoch, 3)
            except Exception as exc:
                raise RcpReadError(path, line_no, f"eval_accuracy epoch_num {epoch!r} is not a number ({exc})")
            have_conv = True
        elif use_train_samples and "train_samples" in body:
            conv = member(load("train_samples"), "value")
            have_conv = True
        if "run_stop" in body and member(load("run_stop"), "key") == "run_stop":
            status = member(load("run_stop"), "metadata", "status")
            stop_line = line_no
            if status == "success":
                if not have_conv:
                    raise RcpReadError(path, line_no, "run_stop with status success comes before any "
                                                      "eval_accuracy (or train_samples) line")
                not_converged = False
                samples = conv
            else:
                not_converged = True
                samples = NOT_CONVERGED
    return RunConvergence(path, not not_converged, samples, bs, benchmark, stop_line)


_OTHER_READERS = {"stable_diffusion", "llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b",
                  "gpt_oss_20b", "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"}


@dataclass
class RcpResult:
    passed: bool
    message: str
    official_crash: bool = False
    bs: Any = None
    record: Optional[RcpRecord] = None
    submission_mean: Optional[float] = None
    norm_factor: float = 1.0
    runs: List[RunConvergence] = field(default_factory=list)
    bypassed: bool = False
    detail: str = ""
    slower: bool = False  # against a reference file: significantly slower (a warning, not a failure)

    def to_dict(self) -> Dict[str, Any]:
        return {"passed": self.passed, "message": self.message, "official_crash": self.official_crash,
                "bs": self.bs, "record": self.record.to_dict() if self.record else None,
                "submission_mean": self.submission_mean, "norm_factor": self.norm_factor,
                "bypassed": self.bypassed, "detail": self.detail,
                "runs": [{"file": r.path, "converged": r.converged, "samples": r.samples}
                         for r in self.runs]}


def _evaluate(record: RcpRecord, samples: List[Any]) -> Tuple[bool, float, float]:
    ordered = sorted(samples)
    kept = ordered[1:len(ordered) - 1]
    mean = math.fsum(kept) / len(kept) if kept else math.nan
    norm = record.mean / mean if mean else math.inf
    norm = 1.0 if norm < 1 else norm
    return mean >= record.mean / record.max_speedup, mean, norm


def check_runs(result_files: List[str], use_train_samples: bool = False,
               pruned: bool = True, bypass: bool = False,
               reference: Optional[RcpRecord] = None, ruleset: str = DEFAULT_RULESET) -> RcpResult:
    """Judge the runs of one benchmark directory against the BERT RCPs, or against
    ``reference`` (see :func:`read_reference`) when given."""
    runs: List[RunConvergence] = []
    try:
        for path in result_files:
            runs.append(read_run(path, use_train_samples))
    except RcpReadError as exc:
        return RcpResult(False, f"cannot read {exc.path} line {exc.line}: {exc.message}",
                         official_crash=True, runs=runs)
    except (OSError, MemoryError) as exc:
        return RcpResult(False, f"cannot read a result file: {exc}", official_crash=True, runs=runs)

    bs: Any = -1
    benchmark = None
    mismatch = ""
    for run in runs:
        if bs == -1:
            bs = run.bs
        elif run.bs != bs:
            mismatch = f"batch sizes differ ({bs!r} and {run.bs!r} in {run.path})"
            break
        if benchmark is None:
            benchmark = run.benchmark
        elif run.benchmark != benchmark:
            mismatch = f"benchmarks differ ({benchmark!r} and {run.benchmark!r} in {run.path})"
            break
    if mismatch:
        # The official checker then has no benchmark name and fails to load RCP data.
        return RcpResult(False, "Could not detect global_batch_size", official_crash=True,
                         runs=runs, detail=mismatch)
    if reference is None and benchmark != "bert":
        # The official checker looks up RCP data for that benchmark name and fails to.
        return RcpResult(False, f"submission_benchmark is {benchmark!r}, not 'bert'; no RCP data",
                         official_crash=True, runs=runs)
    if bs == -1:
        return RcpResult(False, "Could not detect global_batch_size", runs=runs,
                         detail="no global_batch_size line found")
    not_converged = sum(1 for r in runs if not r.converged)
    if not_converged > 1:
        return RcpResult(False, "Insufficient convergence", bs=bs, record=reference, runs=runs,
                         detail=f"{not_converged} runs did not end with run_stop status success")
    if reference is not None:
        return _check_against_reference(reference, runs, bs)

    full, kept = rcp_tables(ruleset)
    table = kept if pruned else full
    mean: Optional[float] = None
    norm = 1.0
    passed = False
    try:
        record = next((r for r in table if r.bs == bs), None)
        if record is not None:
            message = "RCP found"
            passed, mean, norm = _evaluate(record, [r.samples for r in runs])
        else:
            lower = [r for r in table if 0 < r.bs < bs]
            upper = [r for r in table if bs < r.bs < 1e9]
            if lower and upper:
                message = "RCP Interpolation"
                record = _interp(bs, lower[-1], upper[0])
                passed, mean, norm = _evaluate(record, [r.samples for r in runs])
            elif lower:
                message = f"Missing RCP, please submit RCP with BS = {bs}"
            elif upper:
                record = table[0]
                passed, mean, norm = _evaluate(record, [r.samples for r in runs])
                message = ("RCP not found but slower convergence on smaller batch size" if passed
                           else f"Missing RCP, please submit RCP with BS = {bs}")
            else:
                message = "Cannot find any RCPs"
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return RcpResult(False, f"cannot evaluate the runs ({type(exc).__name__}: {exc})",
                         official_crash=True, bs=bs, runs=runs)
    result = RcpResult(passed, message, bs=bs, record=record, submission_mean=mean,
                       norm_factor=norm, runs=runs)
    if bypass and not passed and (message in ("RCP found", "RCP Interpolation")
                                  or message.startswith("Missing RCP")):
        result.passed = True
        result.bypassed = True
        result.message += " passed using rcp_bypass"
    return result


def check_directory(directory: str, use_train_samples: bool = False, pruned: bool = True,
                    bypass: bool = False, reference: Optional[RcpRecord] = None,
                    ruleset: str = DEFAULT_RULESET) -> RcpResult:
    """:func:`check_runs` over ``directory/result_*.txt`` (in directory order, as the official)."""
    files = glob.glob("{folder}/result_*.txt".format(folder=directory.rstrip("/")), recursive=True)
    return check_runs(files, use_train_samples, pruned, bypass, reference, ruleset)


# ------------------------------------------------------------------------------------------
# A reference of one's own: benchmarks without official RCP data (the mini benchmark, a new
# recipe) get the same test against reference runs of another implementation, both ways.

class RcpReferenceError(Exception):
    """A reference file that cannot be used; the message names the file and what is wrong."""


def read_reference(path: str) -> RcpRecord:
    """An RCP from a file of reference runs.

    The file is JSON: ``{"global_batch_size": N, "runs": [{"samples_to_converge": S}, ...]}``
    (other fields are kept for people; ``samples_to_converge`` is null for a run that missed the
    target). Runs that missed the target are left out of the statistics, as the official RCP data
    holds converged runs only; at least four converged runs are needed for an olympic mean with
    a spread.
    """
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise RcpReferenceError(f"{path}: cannot read the RCP reference ({exc.strerror})")
    except ValueError as exc:
        raise RcpReferenceError(f"{path}: the RCP reference is not valid JSON ({exc})")
    if not isinstance(doc, dict):
        raise RcpReferenceError(f"{path}: the RCP reference must be a JSON object")
    bs = doc.get("global_batch_size")
    if not isinstance(bs, int) or isinstance(bs, bool) or bs <= 0:
        raise RcpReferenceError(f"{path}: field 'global_batch_size' must be a positive integer, got {bs!r}")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and "samples_to_converge" in r for r in runs):
        raise RcpReferenceError(f"{path}: field 'runs' must be a list of objects with 'samples_to_converge'")
    samples = []
    for i, run in enumerate(runs):
        value = run["samples_to_converge"]
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise RcpReferenceError(f"{path}: runs[{i}].samples_to_converge must be a positive number "
                                    f"or null, got {value!r}")
        samples.append(float(value))
    if len(samples) < 4:
        raise RcpReferenceError(f"{path}: {len(samples)} converged reference runs; the RCP test needs at least 4")
    return record_from_runs(bs, samples, doc.get("hyperparams"))


def max_acceptable_mean(record: RcpRecord) -> float:
    """Largest submission mean not significantly above the reference's: the t-test is symmetric
    in the means, so the bound mirrors :func:`min_acceptable_mean` around the reference mean."""
    return 2 * record.mean - record.min_mean


def _check_against_reference(record: RcpRecord, runs: List[RunConvergence], bs: Any) -> RcpResult:
    if bs != record.bs:
        return RcpResult(False, f"the runs' global batch size {bs!r} differs from the reference's {record.bs}",
                         bs=bs, record=record, runs=runs)
    if len(runs) < 3:
        return RcpResult(False, f"{len(runs)} run(s): an olympic mean needs at least 3", bs=bs, record=record,
                         runs=runs)
    fast_enough, mean, norm = _evaluate(record, [r.samples for r in runs])
    high = max_acceptable_mean(record)
    if not fast_enough:
        message = "faster than the reference beyond its spread"
    elif mean > high:
        message = "slower than the reference beyond its spread"
    else:
        message = "within the reference's bounds"
    # As in MLPerf, only converging too fast fails; converging slower is reported, since an
    # implementation of the same recipe should not be slower either.
    return RcpResult(fast_enough, message, bs=bs, record=record, submission_mean=mean,
                     norm_factor=norm, runs=runs, slower=fast_enough and mean > high,
                     detail=f"bounds {record.min_mean:,.0f} to {high:,.0f} samples from {record.runs} reference runs")
