"""Stage 5, the WCET: a bound on a call's time from the fitted costs.

In: static models, fits, loop bounds (given or observed), the inputs' counts.  Out:
:class:`~wcetfit.wcet.ipet.WcetResult` — the IPET bound (integer program over the CFG's
edge flows), its worst path, margin and dispersion, and every assumption it rests on.
:mod:`~wcetfit.wcet.envelope` derives the observed path envelopes.
"""
