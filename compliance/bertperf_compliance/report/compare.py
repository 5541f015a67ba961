"""Comparisons between result sets: score ratio with a bootstrap confidence interval, and a regression flag.

The ratio is candidate score / baseline score (time to train, so above 1 means
the candidate is slower).  Its uncertainty comes from the run-to-run spread:
each set's converged run times are resampled with replacement, the olympic
score is recomputed exactly as for the real score (same trimming, same failed
run count, same scaling factor), and the percentile interval of the ratio over
the resamples is reported.  The generator is seeded, so a report is
reproducible.

A comparison is *slower* when the whole interval lies above 1, *faster* when
it lies below 1, otherwise *within noise*.  When both sets are the same
system (same submitter and system name, e.g. an old and a new result tree), a
*slower* verdict is flagged as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .systems import MAX_DROPPED_RUNS, ResultSet

DEFAULT_RESAMPLES = 10000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline; ratio and interval are None when either has no score."""

    baseline: str
    candidate: str
    same_system: bool
    ratio: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    confidence: float

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "no score"
        if self.ci_low > 1.0:
            return "slower"
        if self.ci_high < 1.0:
            return "faster"
        return "within noise"

    @property
    def regression(self) -> bool:
        return self.same_system and self.verdict == "slower"


def _bootstrap_scores(result_set: ResultSet, rng: np.random.Generator, resamples: int) -> np.ndarray:
    times = np.asarray(result_set.times_min, dtype=float)
    draws = np.sort(rng.choice(times, size=(resamples, times.size), replace=True), axis=1)
    kept = draws[:, MAX_DROPPED_RUNS:times.size - (MAX_DROPPED_RUNS - result_set.dropped)]
    return kept.mean(axis=1) * result_set.scaling_factor


def compare(baseline: ResultSet, candidate: ResultSet, seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE) -> Comparison:
    """Compare two result sets; see the module docstring for the method."""
    same = baseline.identity == candidate.identity
    base_score, cand_score = baseline.score_min, candidate.score_min
    if base_score is None or cand_score is None:
        return Comparison(baseline.label, candidate.label, same, None, None, None, confidence)
    rng = np.random.default_rng(seed)
    ratios = _bootstrap_scores(candidate, rng, resamples) / _bootstrap_scores(baseline, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return Comparison(baseline.label, candidate.label, same, cand_score / base_score,
                      float(low), float(high), confidence)


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
