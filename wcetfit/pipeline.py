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
