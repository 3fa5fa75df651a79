"""Scaffolding: a new target folder for one function of a library (``wcetfit init``).

In: a binary, a function (symbol or ``0x…`` address) and, unless the binary carries
DWARF, the C header declaring it.  Out: ``wcetfit.toml`` (prototype, the type
declarations it needs, commented loop entries from the static model) and ``inputs.py``
(a ``generate(ctx)`` filling every parameter by its type).  Modules: ``header``
(pycparser front end), ``constants`` (what a header says about values: its integer
constants, the values its comments give), ``dwarf`` (pyelftools front end),
``declaration`` (what both produce), ``inputs_writer``, ``create`` (the steps, and the
target file).
"""
