"""Shared helpers for the bertperf-check tests: the official tools as oracle, the
shared result corpus, and a generator of synthetic BERT logs.

The official ``mlperf_logging`` package is run in-process.  Its compliance
checker keeps its queue of rule files in a module-level list, which a crash
leaves non-empty, so every call clears it first.  Anything the official tools
raise counts as a failed verdict, as it does on the command line (exit 1, or no
success line from the package checker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
try:  # the package is normally installed (pip install -e compliance); work without it too
    import bertperf_compliance  # noqa: F401
except ImportError:
    import sys
    sys.path.insert(0, str(REPO / "compliance"))
RULESETS = ("2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0")
# Rulesets of the log checker; the package and RCP checks cover RULESETS.
LOG_RULESETS = ("1.1.0", "2.0.0") + RULESETS


def shared_dir() -> Path:
    return Path(os.environ.get("BERTPERF_SHARED_DIR", REPO.parent / "shared"))


def results_dir() -> Path:
    return shared_dir() / "mlperf-results"


def require_results() -> Path:
    path = results_dir()
    if not path.is_dir():
        pytest.skip(f"shared MLPerf results not found at {path} (set BERTPERF_SHARED_DIR)")
    return path


def corpus_logs() -> List[Path]:
    path = results_dir()
    return sorted(path.glob("*/*/results/*/bert/result_*.txt")) if path.is_dir() else []


def corpus_trees() -> List[Path]:
    path = results_dir()
    return sorted(p.parent for p in path.glob("*/*/systems")) if path.is_dir() else []


class _CachedYaml:
    """Stands in for the ``yaml`` module inside the official checker: it parses each rule
    file once per session (the files never change), which is most of its run time."""

    def __init__(self, real):
        self._real = real
        self.BaseLoader = real.BaseLoader
        self._cache = {}

    def load(self, stream, Loader):
        name = getattr(stream, "name", None)
        if name is None:
            return self._real.load(stream, Loader=Loader)
        if name not in self._cache:
            self._cache[name] = self._real.load(stream, Loader=Loader)
        return self._cache[name]


def official():
    mc = pytest.importorskip("mlperf_logging.compliance_checker.mlp_compliance")
    if not isinstance(mc.yaml, _CachedYaml):
        mc.yaml = _CachedYaml(mc.yaml)
    return mc


@contextlib.contextmanager
def _silenced():
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def official_log_verdict(path, ruleset: str, werror: bool = False) -> bool:
    mc = official()
    mc.enqueued_configs.clear()
    with _silenced():
        try:
            checker = mc.make_checker("training", ruleset, True, werror)
            return bool(mc.main(str(path), f"training_{ruleset}/common.yaml", checker)[0])
        except BaseException as exc:  # noqa: BLE001 - a crash is a failed verdict
            if isinstance(exc, KeyboardInterrupt):
                raise
            return False
        finally:
            mc.enqueued_configs.clear()


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def official_package_verdict(folder, ruleset: str, *, rcp_bypass=False, train_samples=False,
                             seed_bypass=False) -> bool:
    """Official package checker verdict on a *copy* (it may write scaling.json)."""
    pytest.importorskip("mlperf_logging.package_checker.package_checker")
    mc = official()
    from mlperf_logging.package_checker import package_checker as pc
    capture = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    mc.enqueued_configs.clear()
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                pc.check_training_package(str(folder), "training", ruleset, True, False, rcp_bypass,
                                          train_samples, seed_bypass, os.devnull)
    except Exception:
        return False
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
        mc.enqueued_configs.clear()
    return any("PACKAGE CHECKER FOUND NO ERRORS" in line for line in capture.lines)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    os.chmod(dst, 0o755)
    return dst


# ------------------------------------------------------------------------------------------
# Synthetic logs.

def bert_tensor_names() -> List[str]:
    from bertperf_compliance.check.rules import BERT_TENSOR_NAMES
    return list(BERT_TENSOR_NAMES)


def mllog_line(key, value=None, metadata=None, time_ms=1_700_000_000_000, event="POINT_IN_TIME") -> str:
    md = {"file": "harness.cc", "lineno": 10}
    md.update(metadata or {})
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": event,
                                     "key": key, "value": value, "metadata": md})


def make_log_lines(division="closed", seed=1234, gbs=448, accuracies=(0.40, 0.65, 0.71, 0.7205),
                   t0=1_700_000_000_000) -> List[str]:
    """A BERT log that passes every ruleset 2.1.0 to 5.0.0 (the recommended order)."""
    t = [t0]

    def at(step=1):
        t[0] += step
        return t[0]

    out = [mllog_line("cache_clear", True, time_ms=at()),
           mllog_line("init_start", None, time_ms=at(), event="INTERVAL_START")]
    for key, val in (("submission_benchmark", "bert"), ("submission_org", "bertperf"),
                     ("submission_division", division), ("submission_status", "onprem"),
                     ("submission_platform", "cpu-test")):
        out.append(mllog_line(key, val, time_ms=at()))
    out.append(mllog_line("seed", seed, {"lineno": 42}, time_ms=at()))
    hps = (("global_batch_size", gbs), ("gradient_accumulation_steps", 1),
           ("opt_base_learning_rate", 0.000425), ("opt_epsilon", 1e-06), ("opt_lamb_epsilon", 1e-06),
           ("opt_learning_rate_training_steps", 6700), ("opt_learning_rate_warmup_steps", 0),
           ("num_warmup_steps", 0), ("start_warmup_step", 0), ("opt_lamb_beta_1", 0.9),
           ("opt_lamb_beta_2", 0.999), ("opt_lamb_weight_decay_rate", 0.01),
           ("max_sequence_length", 512))
    for key, val in hps:
        out.append(mllog_line(key, val, time_ms=at()))
    for name in bert_tensor_names():
        out.append(mllog_line("weights_initialization", None, {"tensor": name}, time_ms=at()))
    out.append(mllog_line("init_stop", None, time_ms=at(60_000), event="INTERVAL_END"))
    out.append(mllog_line("run_start", None, time_ms=at(), event="INTERVAL_START"))
    out.append(mllog_line("block_start", None, {"first_epoch_num": 1, "epoch_count": 1},
                          time_ms=at(), event="INTERVAL_START"))
    samples = 0
    for acc in accuracies:
        samples += 150080
        out.append(mllog_line("eval_start", None, {"epoch_num": samples}, time_ms=at(1000),
                              event="INTERVAL_START"))
        out.append(mllog_line("eval_stop", None, {"epoch_num": samples}, time_ms=at(), event="INTERVAL_END"))
        out.append(mllog_line("eval_accuracy", acc, {"epoch_num": samples}, time_ms=at()))
    out.append(mllog_line("block_stop", None, {"first_epoch_num": 1}, time_ms=at(), event="INTERVAL_END"))
    out.append(mllog_line("train_samples", samples, time_ms=at()))
    out.append(mllog_line("eval_samples", 10000, time_ms=at()))
    out.append(mllog_line("run_stop", None, {"status": "success"}, time_ms=at(), event="INTERVAL_END"))
    return out


def write_lines(path: Path, lines: List[str], newline: str = "\n") -> Path:
    path.write_text(newline.join(lines) + newline, encoding="latin-1", newline="")
    return path


def find_index(lines: List[str], key: str, nth: int = 0) -> Optional[int]:
    needle = f'"key": "{key}"'
    hits = [i for i, line in enumerate(lines) if needle in line]
    return hits[nth] if len(hits) > nth else None
