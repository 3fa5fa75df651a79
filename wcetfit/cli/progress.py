"""Progress bars with rate and ETA for the long stages (on stderr, only on a terminal)."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator


@contextlib.contextmanager
def progress_bars() -> Iterator[Callable[[str, int, int], None]]:
    """Yield ``update(stage, done, total)``; one bar per stage, created on first use."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn,
                               TextColumn, TimeElapsedColumn, TimeRemainingColumn)

    console = Console(file=sys.stderr)
    bars = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                    TaskProgressColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, disable=not console.is_terminal, transient=False)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bars.add_task(stage, total=total, completed=done)
        bars.update(tasks[stage], completed=done, total=total)

    with bars:
        yield update
