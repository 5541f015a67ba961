"""Comparisons between result sets: ratios with bootstrap confidence intervals, and a regression flag.

Two ratios, candidate over baseline:

* *time*: the MLPerf score (time to train).  Above 1 means the candidate is
  slower.  Its noise is dominated by convergence: runs stop at whole evals,
  so times jump by one eval interval from run to run.
* *throughput*: mean effective samples/s of the converged runs.  Below 1
  means the candidate is slower.  It is far less noisy, so it catches a
  small speed regression that the score's noise hides.

The uncertainty of each comes from the run-to-run spread: each set's runs are
resampled with replacement, the statistic is recomputed exactly as for the
real value (for the score: same olympic trimming, same failed-run count, same
scaling factor), and the percentile interval of the ratio over the resamples
is reported.  The generator is seeded, so a report is reproducible.

A ratio is *slower* or *faster* when its whole interval lies on that side of
1, otherwise *within noise*.  When both sets are the same system (same
submitter and system name, e.g. an old and a new result tree), a *slower*
verdict on either ratio is flagged as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .systems import MAX_DROPPED_RUNS, ResultSet

DEFAULT_RESAMPLES = 10000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Ratio:
    """Candidate value / baseline value with its bootstrap interval; None where a value is missing."""

    value: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    higher_is_slower: bool

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "n/a"
        if self.ci_low > 1.0:
            return "slower" if self.higher_is_slower else "faster"
        if self.ci_high < 1.0:
            return "faster" if self.higher_is_slower else "slower"
        return "within noise"


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline, by score and by throughput."""

    baseline: str
    candidate: str
    same_system: bool
    time: Ratio
    throughput: Ratio
    confidence: float

    @property
    def regression_in(self) -> List[str]:
        """Which ratios show a same-system slowdown beyond noise."""
        if not self.same_system:
            return []
        return [name for name, ratio in (("time", self.time), ("throughput", self.throughput))
                if ratio.verdict == "slower"]

    @property
    def regression(self) -> bool:
        return bool(self.regression_in)


def _resample(values: Sequence[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    return rng.choice(data, size=(resamples, data.size), replace=True)


def _olympic_scores(result_set: ResultSet, rng: np.random.Generator, resamples: int) -> np.ndarray:
    draws = np.sort(_resample(result_set.times_min, rng, resamples), axis=1)
    n = draws.shape[1]
    kept = draws[:, MAX_DROPPED_RUNS:n - (MAX_DROPPED_RUNS - result_set.dropped)]
    return kept.mean(axis=1) * result_set.scaling_factor


def _effective_throughputs(result_set: ResultSet) -> List[float]:
    return [r.throughput_effective for r in result_set.converged_runs if r.throughput_effective is not None]


def _mean_throughputs(result_set: ResultSet, rng: np.random.Generator, resamples: int) -> np.ndarray:
    return _resample(_effective_throughputs(result_set), rng, resamples).mean(axis=1)


def _ratio(baseline: ResultSet, candidate: ResultSet, point: Optional[Tuple[float, float]],
           bootstrap: Callable[[ResultSet, np.random.Generator, int], np.ndarray],
           higher_is_slower: bool, seed: int, resamples: int, confidence: float) -> Ratio:
    if point is None:
        return Ratio(None, None, None, higher_is_slower)
    rng = np.random.default_rng(seed)
    ratios = bootstrap(candidate, rng, resamples) / bootstrap(baseline, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return Ratio(point[1] / point[0], float(low), float(high), higher_is_slower)


def compare(baseline: ResultSet, candidate: ResultSet, seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE) -> Comparison:
    """Compare two result sets; see the module docstring for the method."""
    scores = (baseline.score_min, candidate.score_min)
    throughputs = (baseline.mean_of("throughput_effective"), candidate.mean_of("throughput_effective"))
    time = _ratio(baseline, candidate, None if None in scores else scores,
                  _olympic_scores, True, seed, resamples, confidence)
    throughput = _ratio(baseline, candidate, None if None in throughputs else throughputs,
                        _mean_throughputs, False, seed, resamples, confidence)
    return Comparison(baseline.label, candidate.label, baseline.identity == candidate.identity,
                      time, throughput, confidence)


def comparison_pairs(sets: Sequence[ResultSet], baseline_index: int = 0) -> List[Tuple[ResultSet, ResultSet]]:
    """Every set against the baseline, and every repeat of a system against its first appearance."""
    if len(sets) < 2:
        return []
    baseline = sets[baseline_index]
    pairs = [(baseline, s) for s in sets if s is not baseline]
    first_seen = {}
    for s in sets:
        first = first_seen.setdefault(s.identity, s)
        if first is not s and first is not baseline:
            pairs.append((first, s))
    return pairs


def compare_all(sets: Sequence[ResultSet], baseline_index: int = 0, seed: int = DEFAULT_SEED,
                resamples: int = DEFAULT_RESAMPLES,
                confidence: float = DEFAULT_CONFIDENCE) -> List[Comparison]:
    return [compare(b, c, seed, resamples, confidence) for b, c in comparison_pairs(sets, baseline_index)]
