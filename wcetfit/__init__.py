"""wcetfit: measurement-based WCET estimation for x86-64 Linux binaries.

Pipeline (one module each): static model (:mod:`wcetfit.binary`, :mod:`wcetfit.structure`)
→ count run on an instrumented copy (:mod:`wcetfit.relocate`, :mod:`wcetfit.measure`)
→ timing run of the original code (:mod:`wcetfit.timing`) → least-squares fit
(:mod:`wcetfit.fit`) → IPET bound (:mod:`wcetfit.wcet`) → report (:mod:`wcetfit.report`).
"""

__version__ = "0.1.0"
