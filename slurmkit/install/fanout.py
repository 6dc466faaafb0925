"""Run one function per node with bounded concurrency; a progress bar on stderr when it is a terminal."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar
from collections.abc import Callable

R = TypeVar("R")


def fan_out(
    nodes: list[str], work: Callable[[str], R], parallel: int, *, progress: bool | None = None, label: str = "install"
) -> list[R]:
    """work(node) for every node, at most `parallel` at a time; results in the order of `nodes`.
    `work` must not raise (run_node turns every failure into a result)."""
    if progress is None:
        progress = sys.stderr.isatty()
    results: dict[str, R] = {}
    bar = None
    if progress and nodes:
        import click

        bar = click.progressbar(
            length=len(nodes), label=label, file=sys.stderr, show_pos=True, item_show_func=lambda n: n
        )
        bar.__enter__()
    try:
        with ThreadPoolExecutor(
            max_workers=max(1, min(parallel, len(nodes) or 1)), thread_name_prefix="slurmkit-install"
        ) as pool:
            futs = {pool.submit(work, n): n for n in nodes}
            for f in as_completed(futs):
                results[futs[f]] = f.result()
                if bar is not None:
                    bar.update(1, futs[f])
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    return [results[n] for n in nodes]
