"""What a sync says: its errors, and its report (SyncReport), the same for every destination and caller."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..record import Record, field, fields

if TYPE_CHECKING:
    from typing import Any


class SyncError(Exception):
    """A sync that cannot go on (bad pattern, refused path, verification failure)."""


class Deferred(Exception):
    """The budget ran out; the rest is left for the background sync."""


class SyncReport(Record, kw_only=False):
    """The outcome of one sync. `status`: ok | partial (budget spent, the rest deferred) | failed | dry-run |
    nothing (no checkpoint to sync) | disabled | disabled-by-job. Readable as a mapping too (`rep["copied"]`),
    the JSON shape of `slurmkit sync --json` and of the health log's evidence; keys that only some runs have
    (copy/prune of a dry run, background_pid, finish, killed, ...) live in `extra`."""

    status: str = "ok"
    source: str = ""
    dest: str = ""
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    # --- the mapping view (JSON, the fork pipe, callers that index) ---
    def _is_field(self, k: str) -> bool:
        return k in _FIELDS

    def __getitem__(self, k: str) -> Any:
        if self._is_field(k):
            return getattr(self, k)
        return self.extra[k]

    def __setitem__(self, k: str, v: Any) -> None:
        if self._is_field(k):
            setattr(self, k, v)
        else:
            self.extra[k] = v

    def __contains__(self, k: object) -> bool:
        return isinstance(k, str) and (self._is_field(k) or k in self.extra)

    def get(self, k: str, default: Any = None) -> Any:
        return self[k] if k in self else default  # noqa: SIM401 - this IS get(); the rule's fix recurses

    def setdefault(self, k: str, default: Any) -> Any:
        if k not in self:
            self[k] = default
        return self[k]

    def update(self, *args: dict, **kw: Any) -> None:
        for d in (*args, kw):
            for k, v in d.items():
                self[k] = v

    def keys(self) -> list[str]:
        return list(self.as_dict())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.as_dict().items())

    def as_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in _FIELDS}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyncReport:
        rep = cls()
        rep.update(d)
        return rep


_FIELDS = tuple(f.name for f in fields(SyncReport) if f.name != "extra")


def empty_report(source: str = "", dest: str = "") -> SyncReport:
    return SyncReport(source=source, dest=dest)
