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
    # not on a terminal (a pipe, a log file): no bars, but a plain line for a stage that
    # runs longer than PLAIN_AFTER_S, and again every PLAIN_EVERY_S (a worst-case search
    # of 100 MB inputs ran a quarter of an hour with nothing on the screen)
    plain = not console.is_terminal
    started: dict[str, float] = {}
    said: dict[str, float] = {}
    ended: set[str] = set()

    def update(stage: str, done: int, total: int) -> None:
        # a Ctrl-C the interpreter swallowed (one that lands in a weakref callback or a
        # __del__ is "ignored") is raised again here, at the next input, not lost
        from wcetfit.cli.interrupt import raise_if_interrupted
        raise_if_interrupted()
        if plain:
            import time
            now = time.monotonic()
            started.setdefault(stage, now)
            last = said.get(stage, started[stage] + PLAIN_AFTER_S - PLAIN_EVERY_S)
            finished = done >= total and stage in said and stage not in ended
            if stage not in ended and (now - last >= PLAIN_EVERY_S or finished):
                said[stage] = now
                if done >= total:
                    ended.add(stage)
                sys.stderr.write(f"{stage}: {done:,} of {total:,} ({now - started[stage]:,.0f} "
                                 f"s so far)\n")
                sys.stderr.flush()
            return
        if stage not in tasks:
            # start counting from what the store already had: the rate is of this run
            tasks[stage] = bars.add_task(stage, total=total, completed=done)
        bars.update(tasks[stage], completed=done, total=total)

    with bars:
        yield update


# Not on a terminal: a stage's first plain progress line after this many seconds, then
# one every PLAIN_EVERY_S, and one when it ends if any was said.
PLAIN_AFTER_S = 60.0
PLAIN_EVERY_S = 60.0


# A step without a progress bar (the fit, the bound) that runs longer than this says so
# on stderr, and again every STILL_EVERY_S: a large library function's analysis takes
# minutes after its measurements (brotli's encoder, 894 loops), and a user saw a silent
# terminal for a quarter of an hour.
STILL_AFTER_S = 30.0
STILL_EVERY_S = 120.0


@contextlib.contextmanager
def still_working(what: str, *, after: float = STILL_AFTER_S,
                  every: float = STILL_EVERY_S) -> Iterator[None]:
    """One line on stderr when the step inside takes longer than ``after`` seconds
    ("analysing f: 30 s so far …"), again every ``every`` seconds, and how long it took
    when it said anything (on a terminal or not: a log file is as silent)."""
    import threading
    import time

    start = time.monotonic()
    done = threading.Event()
    said = [False]

    def tell() -> None:
        wait = after
        while not done.wait(wait):
            sys.stderr.write(f"{what}: {time.monotonic() - start:,.0f} s so far (large "
                             f"functions take minutes here)\n")
            sys.stderr.flush()
            said[0] = True
            wait = every

    thread = threading.Thread(target=tell, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if said[0]:
            sys.stderr.write(f"{what}: done in {time.monotonic() - start:,.0f} s\n")
