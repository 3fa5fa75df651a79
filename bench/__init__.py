"""Benchmarks: performance and accuracy figures (``make bench``)."""
