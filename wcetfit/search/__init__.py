"""Worst-case input search: the slowest input found from below.

In: a target, its static model and a fit of the measured function.  Out: candidate inputs
(each a recorded *choice sequence* of the draws ``generate(ctx)`` took from ``ctx.rng``)
ranked by the model's predicted time, the best of them timed and kept as rows of the store.

The search never needs the user's ``generate`` to change: :mod:`~wcetfit.search.choices`
records every draw it makes and replays a mutated record (the idea of Hypothesis's choice
sequences), :mod:`~wcetfit.search.mutate` changes a few draws (towards the ends of their
ranges, where worst cases usually hide), :mod:`~wcetfit.search.candidates` counts and times
candidates in child processes, :mod:`~wcetfit.search.engine` runs the generations
ranked by the model, :mod:`~wcetfit.search.timed` a second phase ranked by measured time
(costs that depend on the data, which the counts cannot rank).
"""
