"""bertperf-check against the official compliance checker on every published log in the
shared MLPerf results, under every BERT ruleset (1.1.0 to 5.0.0)."""

import pytest

from compliance_support import LOG_RULESETS, corpus_logs, official_log_verdict, require_results
from bertperf_compliance.check.engine import check_log


@pytest.mark.parametrize("ruleset", LOG_RULESETS)
def test_corpus_verdicts_equal_official(ruleset):
    require_results()
    logs = corpus_logs()
    assert len(logs) >= 30
    mismatches = []
    for path in logs:
        ours = check_log(path, ruleset)
        theirs = official_log_verdict(path, ruleset)
        if ours.passed != theirs:
            mismatches.append((str(path), ours.passed, theirs))
        if not ours.passed:
            # Every failure names the file, a rule, and a fix.
            assert ours.errors, path
            for finding in ours.errors:
                assert finding.file == str(path) and finding.rule.startswith(ruleset) and finding.fix
    assert not mismatches


def test_v21_logs_hit_the_opt_lamb_epsilon_trap():
    require_results()
    v21 = [p for p in corpus_logs() if "/v2.1/" in str(p)]
    assert v21
    for path in v21:
        res = check_log(path, "2.1.0")
        assert not res.passed
        [finding] = res.errors
        assert finding.key == "opt_lamb_epsilon" and "opt_epsilon" in finding.message


def test_v21_logs_pass_the_rulesets_of_their_era():
    """The v2.1 submissions log opt_epsilon only: rulesets 1.1.0 and 2.0.0 (which want that name)
    accept them, as the official checker does (test_corpus_verdicts_equal_official)."""
    require_results()
    v21 = [p for p in corpus_logs() if "/v2.1/" in str(p)]
    assert v21
    for ruleset in ("1.1.0", "2.0.0"):
        assert all(check_log(p, ruleset).passed for p in v21), ruleset
