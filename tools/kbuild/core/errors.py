"""User-facing errors: each names the file, the key and what to do."""

from __future__ import annotations

from pathlib import Path


class BuildError(Exception):
    """An error caused by the user's input or machine, reported without a traceback."""

    def __init__(self, message: str, *, file: Path | str | None = None, key: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.key = key
        self.hint = hint

    def __str__(self) -> str:
        where = ": ".join(str(p) for p in (self.file, self.key and f"key `{self.key}`") if p)
        text = f"{where}: {self.message}" if where else self.message
        return f"{text}\n  hint: {self.hint}" if self.hint else text
