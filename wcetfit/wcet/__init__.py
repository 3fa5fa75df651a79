"""Stage 5, the WCET: a bound on a call's time from the fitted costs.

In: static models, fits, loop bounds (given or observed), the inputs' counts.  Out:
:class:`~wcetfit.wcet.result.WcetResult` — the IPET bound (integer program over the CFG's
edge flows), its worst path, margin and dispersion, and every assumption it rests on.

- :mod:`~wcetfit.wcet.analyze` — from the pipeline's plain data (fit, counts, target facts)
  to the bound: :func:`~wcetfit.wcet.analyze.analyze_wcet`, :func:`~wcetfit.wcet.analyze.fit_inputs`;
- :mod:`~wcetfit.wcet.ipet` — the integer program of one function and its solution;
- :mod:`~wcetfit.wcet.flow` — its variables: the flow graph, irreducible cycles;
- :mod:`~wcetfit.wcet.solve` — the program as plain data, solved by HiGHS and checked (the
  constraints recomputed, the measured inputs as feasible points), failures named;
- :mod:`~wcetfit.wcet.loops` — loop bounds: observed in the count run, the user's [loops];
- :mod:`~wcetfit.wcet.relations` — observed count relations, the inputs' row space;
- :mod:`~wcetfit.wcet.envelope` — the observed path envelopes;
- :mod:`~wcetfit.wcet.interproc` — callees and recursion, the root's bound;
- :mod:`~wcetfit.wcet.margin` — the confidence margin (and what the dispersion means);
- :mod:`~wcetfit.wcet.result` — the plain result data and the stage's errors.
"""
