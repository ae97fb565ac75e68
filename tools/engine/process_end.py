"""How a child process ended, in words: for the isolation workers and the implementation hosts alike."""
from __future__ import annotations

import pathlib
import signal

STDERR_TAIL_LINES = 8


def exit_in_words(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def last_words(path: pathlib.Path) -> list[str]:
    """What a dead process wrote last: a fatal error with its innermost Python frames (faulthandler
    prints the most recent call first), or else its last lines."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is None:
        return lines[-STDERR_TAIL_LINES:]
    frames = [line for line in lines[fatal + 1:] if line.lstrip().startswith("File ")]
    return [lines[fatal], *frames[:STDERR_TAIL_LINES - 1]]
