"""A command's stdout or stderr that prints nothing from outside raw (`core.terminal`).

`SafeOutput(stream)` wraps a management command's `self.stdout`/`self.stderr`
(Django's `OutputWrapper`, or any object with `write`): each `write()` is one
line, and everything in it is passed through `terminal_safe()` — a newline
inside a message is shown as ``\\u000a``, never printed as a line of its own.
So a command writes its lines one `write()` each (`lines()` does that), and a
reason, a node name or a relay's message given from outside can neither move
the cursor, recolour the terminal, overwrite a line nor forge one. Everything
else (`flush`, `isatty`, `style_func`) is the wrapped stream's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from elections.core.terminal import terminal_safe


class SafeOutput:
    def __init__(self, stream: Any) -> None:
        self._stream = stream.unwrapped if isinstance(stream, SafeOutput) else stream

    @property
    def unwrapped(self) -> Any:
        return self._stream

    def write(self, msg: Any = "", style_func: Any = None, ending: str | None = None) -> None:
        text = msg if isinstance(msg, str) else str(msg)
        if text.endswith("\n"):
            text = text[:-1]  # the line's own end, added back by the stream
        self._line(terminal_safe(text), style_func, ending)

    def row(self, *fields: Any, sep: str = "\t") -> None:
        """One line of `fields`, each escaped, joined by this command's own `sep` (a tab)."""
        self._line(sep.join(terminal_safe(f) for f in fields))

    def _line(self, safe: str, style_func: Any = None, ending: str | None = None) -> None:
        if hasattr(self._stream, "style_func"):  # Django's OutputWrapper: it adds the line end
            self._stream.write(safe, style_func, ending)
        else:
            self._stream.write(safe + ("\n" if ending is None else ending))

    def lines(self, lines: Iterable[Any]) -> None:
        """Write each item as one escaped line."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def make_safe(command: Any) -> None:
    """Wrap a management command's `stdout` and `stderr` (call at the top of `handle`)."""
    command.stdout, command.stderr = SafeOutput(command.stdout), SafeOutput(command.stderr)
