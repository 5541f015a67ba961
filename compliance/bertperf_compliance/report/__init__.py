"""bertperf-report: scores, throughput, comparisons, tables and plots for MLPerf BERT result trees.

The pieces, in the order data flows through them:

* :mod:`.runs` reads one ``result_*.txt`` into a :class:`~.runs.RunResult`
  (time to train, samples to converge, eval curve, throughput);
* :mod:`.systems` finds the result sets in the trees given on the command line
  and scores each the way the official result summarizer does;
* :mod:`.compare` compares result sets with bootstrap confidence intervals and
  flags regressions;
* :mod:`.render` writes the terminal table, Markdown, CSV and JSON;
* :mod:`.plots` draws the PNG figures;
* :mod:`.cli` is the ``bertperf-report`` command.
"""


class ReportInputError(Exception):
    """Input the reporter cannot use (missing tree, malformed log); the CLI prints it as one line."""
