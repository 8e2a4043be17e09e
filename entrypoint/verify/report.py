"""The verdicts of `kimi-serve verify`: one record per check, the report as text or JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | fail | skip
    latency_ms: float | None = None
    tokens: int | None = None  # completion tokens the check used, when the server reported usage
    detail: str = ""


@dataclass(frozen=True)
class VerifyReport:
    url: str
    model: str | None  # the model name the checks sent
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "model": self.model,
            "ok": self.ok,
            "checks": [asdict(check) for check in self.checks],
        }

    def to_text(self) -> str:
        from entrypoint.core.table import text_table

        rows = []
        for c in self.checks:
            latency = "-" if c.latency_ms is None else f"{c.latency_ms:.0f} ms"
            tokens = "-" if c.tokens is None else str(c.tokens)
            rows.append((c.name, c.status.upper(), latency, tokens, c.detail))
        lines = [f"kimi-serve verify {self.url} (model: {self.model or 'unknown'})",
                 text_table(("CHECK", "STATUS", "LATENCY", "TOKENS", "DETAIL"), rows, right=(2, 3))]
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP)}
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
        return "\n".join(lines)
