"""Where the copies go: one Dest protocol, two kinds (a filesystem path, an s3:// URL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol
from collections.abc import Callable

from .fsdest import FsDest

if TYPE_CHECKING:
    from ..settings import SyncSettings


class Dest(Protocol):
    """A sync destination. Every method runs as the job's user (the sync's privilege-dropped child)."""

    def prepare(self, dry_run: bool = False) -> None:
        """Make the destination exist (not in a dry run)."""

    def lock(self, deadline: float | None) -> None:
        """Serialize syncs to this destination; raise Deferred when the deadline passes first."""

    def unlock(self) -> None: ...

    def scan(self) -> tuple[dict[str, dict], list[str], list[str]]:
        """({name: manifest} complete checkpoints, [other visible names], [our temporary names])."""

    def cleanup(self, resume: list[str]) -> list[str]:
        """Remove leftovers of interrupted runs, except temporary copies of `resume`; the names removed."""

    def publish(
        self,
        src: str,
        name: str,
        man: dict,
        *,
        deadline: float | None,
        workers: int,
        progress: Callable[[int], None] | None,
    ) -> int:
        """Copy checkpoint `src` as NAME, verified against `man`, visible only once complete; bytes copied."""

    def remove(self, name: str) -> None:
        """Delete checkpoint NAME so that no moment shows it half-deleted."""


def make_dest(loc: str, settings: SyncSettings | None = None) -> Dest:
    if loc.startswith("s3://"):
        from .s3 import S3Dest  # boto3 only for s3:// destinations

        return S3Dest(loc, settings)
    return FsDest(loc)
