"""Progress of a long transfer or check: a bar on a terminal, else one line (text, or JSON with
KIMI_LOG_FORMAT=json) every INTERVAL_S seconds with bytes, rate and ETA.

`Progress.hub_bar_class()` is what `huggingface_hub.snapshot_download(tqdm_class=...)` gets: the
hub's own bars (bytes written, bytes received, files) feed this one counter, whose total is
known before the start (from the hub's listing), so the ETA is real from the first line.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional, TextIO

INTERVAL_S = 10.0


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    def __init__(self, what: str, total_bytes: int, total_files: int, log, stream: Optional[TextIO] = None,
                 interval_s: float = INTERVAL_S, tty: Optional[bool] = None):
        self.what, self.total, self.files_total = what, total_bytes, total_files
        self.log, self.interval = log, interval_s
        self.done = self.files_done = 0
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()
        stream = stream or sys.stderr
        self._bar = None
        if tty if tty is not None else stream.isatty():
            from tqdm import tqdm  # noqa: PLC0415 - a third party only this path needs

            self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc=what, file=stream)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
            due = time.monotonic() - self._last >= self.interval
            if due:
                self._last = time.monotonic()
        if due and self._bar is None:
            self.report()

    def file_done(self) -> None:
        with self._lock:
            self.files_done += 1

    def fields(self) -> dict:
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        eta = left / rate if rate > 0 else None
        return {"bytes": self.done, "total_bytes": self.total, "rate_bytes_s": round(rate),
                "eta_s": round(eta) if eta is not None else None, "files": self.files_done,
                "total_files": self.files_total, "elapsed_s": round(elapsed, 1)}

    def report(self, final: bool = False) -> None:
        f = self.fields()
        pct = f"{100 * f['bytes'] / f['total_bytes']:.0f}%" if f["total_bytes"] else "100%"
        eta = "" if final or f["eta_s"] is None else f", ETA {human_seconds(f['eta_s'])}"
        verb = "done" if final else "progress"
        self.log.info(f"{self.what}.{verb}", f"{self.what}: {human_bytes(f['bytes'])} of {human_bytes(f['total_bytes'])} "
                      f"({pct}), {human_bytes(f['rate_bytes_s'])}/s{eta}, {f['files']}/{f['total_files']} files"
                      + (f" in {human_seconds(f['elapsed_s'])}" if final else ""), **f)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def hub_bar_class(self):
        """A tqdm stand-in for the hub's snapshot_download: its 'bytes written' bar feeds `add`,
        its file-count bar feeds `file_done`; the rest is swallowed."""
        progress = self

        class _HubBar:
            def __init__(self, iterable=None, *args, **kwargs):
                self.iterable = iterable
                self.total = kwargs.get("total") or 0
                self.n = 0
                desc = str(kwargs.get("desc") or "")
                unit = kwargs.get("unit", "it")
                self._kind = "files" if unit != "B" else ("bytes" if not desc.startswith("Downloading") else "other")
                self.format_dict = {"rate": None}

            def __iter__(self):
                return iter(self.iterable or ())

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def update(self, n=1):
                n = int(n or 0)
                self.n += n
                if self._kind == "bytes":
                    progress.add(n)
                elif self._kind == "files":
                    progress.file_done()

            def close(self):
                pass

            def refresh(self, *args, **kwargs):
                pass

            def set_description(self, *args, **kwargs):
                pass

            set_description_str = set_postfix_str = set_postfix = set_description

        return _HubBar
