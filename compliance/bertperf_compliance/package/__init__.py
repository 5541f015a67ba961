"""``bertperf-package``: result sets written by ``bertperf run`` into an MLPerf submitter tree.

    <out>/<org>/benchmarks/bert/implementations/<impl>/README.md   how to rebuild, test and rerun
    <out>/<org>/benchmarks/bert/implementations/<impl>/code/       ``git archive`` of the runs' commit
    <out>/<org>/results/<system>/bert/result_*.txt                  the logs, unchanged
    <out>/<org>/systems/<system>.json                               the system descriptions, unchanged

Before anything final is written, the runs must name one clean commit of the repository
(``bertperf_commit`` lines, harness/provenance.h), their hyperparameters and submission fields
must equal what their config logs (``bertperf run-once --dry-run`` of the config at that commit),
the system descriptions must have their ruleset's fields, and the run count, seeds and RCP must
pass; then the staged tree goes through ``bertperf-check``, and the official package checker,
repository checker and result summarizer where they are installed, and only a tree that passes
them all is moved into place. Every refusal is one line naming the file and the fix.
"""
