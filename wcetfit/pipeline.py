"""The stages of an analysis, composed: what ``wcetfit analyze`` and the per-stage
commands share.

Each stage reads what earlier stages left in the target's store and saves what it
measures, so the commands can run one by one (``count``, ``time``, ``fit``, ``report``)
or all together (``analyze``) and an interrupted run continues where it stopped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from wcetfit.model import BinaryModel, FunctionModel
from wcetfit.store import Store
from wcetfit.target import Target, load_target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Session:
    """A target with its static model and store, ready for measuring."""

    target: Target
    model: BinaryModel
    store: Store
    roots: dict[str, int]          # measured function (as named in the target) -> link address

    def root_model(self, name: str) -> FunctionModel:
        return self.model.function(self.roots[name])

    def functions_of(self, name: str) -> dict[str, FunctionModel]:
        """The measured function and the binary's own functions it reaches, transitively."""
        root = self.root_model(name)
        out = {root.name: root}
        todo = [root]
        while todo:
            fn = todo.pop()
            for call in fn.calls:
                if call.kind == "internal" and call.target is not None:
                    callee = self.model.function(call.target)
                    if callee.name not in out:
                        out[callee.name] = callee
                        todo.append(callee)
        return out


def open_session(target_dir: str, *, fresh: bool = False, **overrides: Any) -> Session:
    """Load and validate the target, model its functions, open (or start) its store."""
    from wcetfit import binary
    from wcetfit.measure import open_store

    target = load_target(target_dir, **overrides)
    store = open_store(target, fresh=fresh)
    model = binary.load_model(target.binary, list(target.functions), with_callees=True)
    roots = {name: model.function(name).address for name in target.functions}
    return Session(target, model, store, roots)


Progress = Callable[[str, int, int], None]   # (stage, done, total)


@dataclass(frozen=True)
class Analysis:
    """Everything the report of one measured function is made of."""

    root: str
    functions: dict[str, FunctionModel]
    system: Any          # wcetfit.system.LinearSystem
    fit: Any             # wcetfit.fit.FitResult
    wcet: Any            # wcetfit.wcet.WcetResult, or the WcetError that prevented it
    report: Any          # wcetfit.report.Report


def fit_stage(session: Session, root: str, counts: Any, times: Any,
              options: Any = None) -> tuple[Any, Any]:
    """(LinearSystem, FitResult) of one measured function."""
    from wcetfit.fit import FitOptions, fit_function
    from wcetfit.system import build_system

    functions = session.functions_of(root)
    system = build_system(functions, counts, times)
    fit = fit_function(system.counts, system.ticks, system.addresses,
                       structural_basis=system.structural_basis, tsc_hz=system.tsc_hz,
                       options=options or FitOptions())
    return system, fit


def wcet_stage(session: Session, root: str, system: Any, fit: Any) -> Any:
    """The IPET bound, or the WcetError that prevented it (shown in the report)."""
    from wcetfit.errors import WcetError
    from wcetfit.wcet import analyze_wcet, fit_inputs

    functions = session.functions_of(root)
    fi = fit_inputs(fit, functions)
    try:
        return analyze_wcet(functions, session.root_model(root).name, fi.costs, system.counts,
                            system.columns, loop_facts=session.target.loops,
                            recursion=session.target.recursion, entry_cost=fi.entry_cost,
                            cov=fi.cov, cov_index=fi.cov_index, z=fi.z)
    except WcetError as exc:
        log.warning("%s: no WCET bound: %s", root, exc)
        return exc


def analyze_stage(session: Session, root: str, counts: Any, times: Any) -> Analysis:
    """Fit, WCET and report of one measured function from its stored measurements."""
    from wcetfit.report import build_report

    system, fit = fit_stage(session, root, counts, times)
    wcet = wcet_stage(session, root, system, fit)
    functions = session.functions_of(root)
    report = build_report(functions, session.root_model(root).name, fit, system.counts,
                          system.columns, system.ticks, wcet, system.tsc_hz)
    return Analysis(root, functions, system, fit, wcet, report)


def stored_measurements(session: Session, root: str) -> tuple[Any, Any]:
    """The counts and times of ``root`` in the store, or a clear error saying what to run."""
    from wcetfit.errors import FitError
    from wcetfit.measure import load_counts, load_times, resolve_method

    m = session.target.measure
    counts = load_counts(session.store, root, m.seed)
    if counts is None:
        raise FitError(f"{root}: no counts stored for seed {m.seed}: run `wcetfit count "
                       f"{session.target.directory}` (or `wcetfit analyze`) first")
    method, _ = resolve_method(session.target)
    times = load_times(session.store, root, m.seed, method, m.repeats)
    if times is None:
        raise FitError(f"{root}: no times stored for seed {m.seed}, method {method}, "
                       f"{m.repeats} repeats: run `wcetfit time {session.target.directory}` "
                       "(or `wcetfit analyze`) first")
    return counts, times
