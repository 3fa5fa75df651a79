"""Stage 1, the static model: an x86-64 ELF file in, plain data out.

In: a binary's path.  Out: :class:`wcetfit.model.BinaryModel` — per function its blocks
(instructions, sizes), edges, natural loops, call sites, jump tables, co-execution classes
and the largest rank its count matrix can have.  :mod:`~wcetfit.static.binary` is the only
module of the project that imports angr; :mod:`~wcetfit.static.elfinfo` reads the ELF
itself (symbols, relocations, PLT), :mod:`~wcetfit.static.structure` the graph algorithms
on plain data, :mod:`~wcetfit.static.cfgcache` keeps models on disk by the binary's sha256.
"""
