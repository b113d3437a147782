"""partita.Error: every failure of the compiler or the runtime, with the
located diagnostics (MLIR's errors, warnings and notes) that led to it."""

from typing import List, NamedTuple, Sequence


class Diagnostic(NamedTuple):
    """One diagnostic: severity ("error", "warning", "note", "remark"),
    location ("file:line:col", or a value's name and its place) and message."""

    severity: str
    location: str
    message: str

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.severity}: {self.message}"


class Error(Exception):
    """A compile, plan or run failure. `diagnostics` lists what the compiler
    reported, in order (empty for runtime errors, whose message says it all)."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()):
        super().__init__(message)
        self.message = message
        self.diagnostics: List[Diagnostic] = list(diagnostics)

    def __str__(self) -> str:
        lines = [self.message]
        # The first error is the message already; list everything else.
        lines += [f"  {d}" for d in self.diagnostics
                  if d.severity != "error" or d.message not in self.message]
        return "\n".join(lines)
