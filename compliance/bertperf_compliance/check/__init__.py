"""Compliance checking of MLPerf BERT logs and submission trees (``bertperf-check``)."""
