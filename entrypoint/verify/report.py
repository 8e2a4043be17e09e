"""The verdicts of `kimi-serve verify`: one record per check (core's Check, plus what only a
server check knows), the report as text or JSON."""

from __future__ import annotations

from dataclasses import dataclass

from entrypoint.core.base.check import Check
from entrypoint.core.base.table import text_table

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class ServerCheck(Check):
    latency_ms: float | None = None
    tokens: int | None = None  # completion tokens the check used, when the server reported usage

    def as_dict(self) -> dict:
        return {**super().as_dict(), "latency_ms": self.latency_ms, "tokens": self.tokens}


@dataclass(frozen=True)
class VerifyReport:
    url: str
    model: str | None  # the model name the checks sent
    checks: tuple[ServerCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "model": self.model,
            "ok": self.ok,
            "checks": [check.as_dict() for check in self.checks],
        }

    def to_text(self) -> str:
        rows = []
        for c in self.checks:
            latency = "-" if c.latency_ms is None else f"{c.latency_ms:.0f} ms"
            tokens = "-" if c.tokens is None else str(c.tokens)
            rows.append((c.name, c.status.upper(), latency, tokens, c.message))
        lines = [f"kimi-serve verify {self.url} (model: {self.model or 'unknown'})",
                 text_table(("CHECK", "STATUS", "LATENCY", "TOKENS", "MESSAGE"), rows, right=(2, 3))]
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP)}
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
        return "\n".join(lines)
