"""bertperf_compliance: the Python side of bertperf.

Three commands live here:

* ``bertperf-check`` (``bertperf_compliance.check``) judges MLPerf BERT logs and
  submission trees the way the official ``mlperf-logging`` tools do, with
  messages that name the file, line, key, rule and fix.
* ``bertperf-report`` (``bertperf_compliance.report``) turns result trees into
  scores, tables and plots.
* ``bertperf-package`` (``bertperf_compliance.package``) makes result trees an
  MLPerf submitter tree with the code of the runs' commit, checked as MLCommons
  checks it.

``bertperf_compliance.mllog_parse`` is the shared ``:::MLLOG`` reader.
"""

__version__ = "0.1.0"
