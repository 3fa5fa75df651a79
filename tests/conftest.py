"""Fixtures every test gets."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _wcetfit_logging_restored():
    """The wcetfit logger as it was before the test.  A test that runs the command line
    in its own process (``main([...])``) points that logger at the test's captured
    standard error; left so, every later test's log record went to a closed stream and
    printed "--- Logging error ---" with its arguments into the output of the suite."""
    logger = logging.getLogger("wcetfit")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate
