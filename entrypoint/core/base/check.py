"""One check's outcome, the record node preflight and the server verification both report: what
was checked, its status, what was found and the way out. Each adds what only it knows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # preflight: ok | fixed | warning | error | skipped; verify: pass | fail | skip
    message: str

    def as_dict(self) -> dict:
        return {"check": self.name, "status": self.status, "message": self.message}
