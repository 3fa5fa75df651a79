"""Progress bars with rate and ETA for the long stages (on stderr, only on a terminal)."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator


@contextlib.contextmanager
def progress_bars() -> Iterator[Callable[[str, int, int], None]]:
    """Yield ``update(stage, done, total)``; one bar per stage, created on first use."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                               TextColumn, TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Inputs per second over the recent past (rich's own speed estimate)."""

        def render(self, task) -> Text:  # type: ignore[no-untyped-def, override]
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.1f} inputs/s", style="cyan")

    console = Console(file=sys.stderr)
    bars = Progress(TextColumn("{task.description:<6}"), BarColumn(), MofNCompleteColumn(),
                    RateColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=console, disable=not console.is_terminal)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        # a Ctrl-C the interpreter swallowed (one that lands in a weakref callback or a
        # __del__ is "ignored") is raised again here, at the next input, not lost
        from wcetfit.cli.interrupt import raise_if_interrupted
        raise_if_interrupted()
        if stage not in tasks:
            # start counting from what the store already had: the rate is of this run
            tasks[stage] = bars.add_task(stage, total=total, completed=done)
        bars.update(tasks[stage], completed=done, total=total)

    with bars:
        yield update
