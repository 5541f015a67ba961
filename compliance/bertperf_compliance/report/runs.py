"""One MLPerf BERT run: what a ``result_*.txt`` log says about time, convergence and speed.

Definitions (they follow the official result summarizer and RCP checker, see
the logging spec sections 3.5 and 4.2):

* time to train: ``run_stop.time_ms - run_start.time_ms`` in minutes, with the
  summarizer's pairing (scan in file order, remember the latest ``run_start``
  and ``run_stop`` seen, stop as soon as both are known);
* converged: ``run_stop`` has ``status: "success"`` and some ``eval_accuracy``
  reached the target (the summarizer's compliance check demands the second,
  the RCP checker the first); and, when a ruleset is given, the log passes its
  compliance check, which the summarizer demands of every run it scores (so a
  run whose untimed initialisation overran the budget is dropped);
* samples to converge: ``epoch_num`` of the last ``eval_accuracy`` before
  ``run_stop`` (what the RCP checker reads), unless that is not a sample count
  (Baidu's v2.1 logs put ``1`` there), then the ``train_samples`` value; a
  ``train_samples`` logged before ``run_start`` is a planned budget (Habana's,
  Google's TPU v4 and tinycorp's logs), not what the run trained, and is not
  used for samples or throughput;
* throughput in samples/s: *effective* over the whole timed run, per *eval
  interval* (consecutive ``eval_accuracy`` events, the first interval starting
  at ``run_start``), *steady* (median interval rate after the first, which
  carries the start-up cost) and *train-only* (run time less every
  ``eval_start``..``eval_stop``), where the log has the events each needs;
* untimed initialisation: the first ``init_start`` to ``init_stop``;
* time waiting for data: the ``data_wait_s`` of every ``tracked_stats`` before
  ``run_stop``, summed (bertperf logs, per eval interval, the seconds rank 0's
  training waited for batches; 0 when its read-ahead keeps up), and its share
  of the run's time; None where the log has none (other submitters' logs).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

from ..mllog_parse import parse_log
from . import ReportInputError

TARGET_ACCURACY = 0.720


@dataclass(frozen=True)
class EvalPoint:
    """One ``eval_accuracy`` event: when, after how many samples, and the accuracy."""

    time_ms: float
    samples: Optional[float]
    accuracy: float


@dataclass
class RunResult:
    """Everything the reporter derives from one result log."""

    path: str
    seed: Optional[int] = None
    global_batch_size: Optional[int] = None
    run_start_ms: Optional[float] = None
    run_stop_ms: Optional[float] = None
    status: Optional[str] = None
    reached_target: bool = False
    train_samples: Optional[float] = None  # the samples trained, as logged after run_start
    planned_samples: Optional[float] = None  # a train_samples logged before run_start: a budget
    samples_to_converge: Optional[float] = None
    samples_source: Optional[str] = None
    evals: List[EvalPoint] = field(default_factory=list)
    eval_samples_inferred: bool = False
    eval_time_ms: Optional[float] = None
    eval_count: int = 0  # eval_start..eval_stop pairs summed into eval_time_ms
    init_start_ms: Optional[float] = None
    init_stop_ms: Optional[float] = None
    gradient_accumulation_steps: Optional[int] = None
    data_wait_s: Optional[float] = None  # summed tracked_stats data_wait_s, where the log has them
    compliance: str = ""  # why the log fails the ruleset's compliance check; empty when it passes or unchecked

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def converged(self) -> bool:
        return not self.failure

    @property
    def failure(self) -> str:
        """Why the run does not count toward the score; empty when it does."""
        if self.run_stop_ms is None:
            return "no run_stop"
        if self.status != "success":
            return f"run_stop status {self.status!r}"
        if not self.reached_target:
            return "never reached the target accuracy"
        if self.compliance:
            return f"fails compliance: {self.compliance}"
        return ""

    @property
    def time_to_train_min(self) -> Optional[float]:
        if self.run_start_ms is None or self.run_stop_ms is None:
            return None
        return (self.run_stop_ms - self.run_start_ms) / 60000.0

    @property
    def init_s(self) -> Optional[float]:
        if self.init_start_ms is None or self.init_stop_ms is None:
            return None
        return (self.init_stop_ms - self.init_start_ms) / 1000.0

    @property
    def final_accuracy(self) -> Optional[float]:
        return self.evals[-1].accuracy if self.evals else None

    @property
    def trained_samples(self) -> Optional[float]:
        return self.train_samples if self.train_samples is not None else self.samples_to_converge

    @property
    def throughput_effective(self) -> Optional[float]:
        seconds = self._run_seconds()
        if seconds is None or self.trained_samples is None:
            return None
        return self.trained_samples / seconds

    @property
    def throughput_train_only(self) -> Optional[float]:
        seconds = self._run_seconds()
        if seconds is None or self.trained_samples is None or self.eval_time_ms is None:
            return None
        train_seconds = seconds - self.eval_time_ms / 1000.0
        return self.trained_samples / train_seconds if train_seconds > 0 else None

    @property
    def interval_rates(self) -> List[float]:
        """Samples/s between consecutive evals; the first interval starts at run_start."""
        if self.run_start_ms is None or not self.evals or self.evals[0].samples is None:
            return []
        rates = []
        prev_t, prev_s = self.run_start_ms, 0.0
        for point in self.evals:
            dt = (point.time_ms - prev_t) / 1000.0
            if dt > 0 and point.samples is not None:
                rates.append((point.samples - prev_s) / dt)
            prev_t, prev_s = point.time_ms, point.samples
        return rates

    @property
    def throughput_steady(self) -> Optional[float]:
        rates = self.interval_rates[1:]
        if not rates:
            return None
        rates = sorted(rates)
        mid = len(rates) // 2
        return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2.0

    @property
    def data_wait_share(self) -> Optional[float]:
        """The share of the timed run spent waiting for data."""
        seconds = self._run_seconds()
        if seconds is None or self.data_wait_s is None:
            return None
        return self.data_wait_s / seconds

    def _run_seconds(self) -> Optional[float]:
        if self.time_to_train_min is None or self.time_to_train_min <= 0:
            return None
        return self.time_to_train_min * 60.0


def _number(value) -> Optional[float]:
    # bool is an int in Python; a logged true/false is never a count. NaN and Infinity parse as
    # JSON here but are never a usable measurement.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def compliance_failure(path: str, ruleset: str) -> str:
    """The first error of the log under the ruleset's compliance rules, in a few words ("" if it passes)."""
    from ..check.engine import check_log  # the checker's verdicts equal the official checker's
    result = check_log(os.fspath(path), ruleset)
    if result.passed:
        return ""
    errors = result.errors
    if not errors:
        return f"ruleset {ruleset}"
    first = errors[0]
    where = f"line {first.line}, " if first.line else ""
    what = f"{first.key}: {first.message}" if first.key else first.message
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}{what}{more} (ruleset {ruleset})"


def read_run(path: str, target: float = TARGET_ACCURACY, ruleset: Optional[str] = None) -> RunResult:
    """Read one result log. Raises ReportInputError for an unreadable or malformed log. With a
    ruleset, the log is also checked for compliance (RunResult.compliance)."""
    try:
        parsed = parse_log(os.fspath(path))
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if parsed.errors:
        err = parsed.errors[0]
        more = f" (and {len(parsed.errors) - 1} more malformed lines)" if len(parsed.errors) > 1 else ""
        raise ReportInputError(f"{path}:{err.line}: malformed MLLOG line: {err.message}{more}")
    records = parsed.records
    for rec in records:
        if not math.isfinite(rec.time_ms):
            raise ReportInputError(f"{path}:{rec.line}: malformed MLLOG line: time_ms is {rec.time_ms}")
    run = RunResult(path=os.fspath(path))

    stop_index = None
    for rec in records:
        if rec.key == "run_start":
            run.run_start_ms = rec.time_ms
        elif rec.key == "run_stop":
            run.run_stop_ms = rec.time_ms
            run.status = rec.metadata.get("status")
            stop_index = rec.index
        if run.run_start_ms is not None and run.run_stop_ms is not None:
            break
    if run.run_start_ms is None:
        raise ReportInputError(f"{path}: no run_start event; not an MLPerf result log")

    eval_open_ms = None
    eval_time_ms = 0.0
    saw_eval_interval = False
    raw_evals = []
    for rec in records:
        if stop_index is not None and rec.index > stop_index:
            break
        if rec.key == "seed" and run.seed is None:
            run.seed = _number(rec.value)
        elif rec.key == "global_batch_size":
            run.global_batch_size = _number(rec.value)
        elif rec.key == "gradient_accumulation_steps" and _number(rec.value) is not None:
            run.gradient_accumulation_steps = int(rec.value)
        elif rec.key == "init_start" and run.init_start_ms is None:
            run.init_start_ms = rec.time_ms
        elif rec.key == "init_stop" and run.init_stop_ms is None:
            run.init_stop_ms = rec.time_ms
        elif rec.key == "train_samples":
            if run.run_start_ms is None or rec.time_ms < run.run_start_ms:
                run.planned_samples = _number(rec.value)
            else:
                run.train_samples = _number(rec.value)
        elif rec.key == "eval_start":
            eval_open_ms = rec.time_ms
        elif rec.key == "eval_stop" and eval_open_ms is not None:
            eval_time_ms += rec.time_ms - eval_open_ms
            run.eval_count += 1
            eval_open_ms = None
            saw_eval_interval = True
        elif rec.key == "tracked_stats" and isinstance(rec.value, dict) and \
                _number(rec.value.get("data_wait_s")) is not None:
            run.data_wait_s = (run.data_wait_s or 0.0) + rec.value["data_wait_s"]
        elif rec.key == "eval_accuracy" and _number(rec.value) is not None:
            raw_evals.append((rec.time_ms, _number(rec.metadata.get("epoch_num")), float(rec.value)))
    if saw_eval_interval:
        run.eval_time_ms = eval_time_ms
    run.reached_target = any(acc >= target for _, _, acc in raw_evals)
    run.evals = _eval_points(run, raw_evals)
    if ruleset is not None:
        run.compliance = compliance_failure(path, ruleset)
    return run


def _eval_points(run: RunResult, raw_evals) -> List[EvalPoint]:
    """Attach a sample count to every eval and set samples_to_converge from the last one."""
    samples = [s for _, s, _ in raw_evals]
    logged_counts = (
        bool(samples)
        and all(s is not None for s in samples)
        and all(b > a for a, b in zip(samples, samples[1:]))
        and samples[-1] >= (run.global_batch_size or 1)
    )
    if logged_counts:
        run.samples_to_converge = samples[-1]
        run.samples_source = "eval epoch_num"
    elif run.train_samples is not None:
        run.samples_to_converge = run.train_samples
        run.samples_source = "train_samples"
        # Without per-eval counts, assume evenly spaced evals ending at train_samples,
        # which is how every MLPerf BERT implementation schedules them.
        n = len(raw_evals)
        samples = [run.train_samples * (i + 1) / n for i in range(n)]
        run.eval_samples_inferred = n > 0
    else:
        samples = [None] * len(raw_evals)
    return [EvalPoint(t, s, acc) for (t, _, acc), s in zip(raw_evals, samples)]
