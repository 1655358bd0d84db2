"""SIGINT and SIGTERM: the one home of the builder's signal handling.

- `as_interrupts`: for the whole command, both raise `Interrupted` in the main thread, so the build
  stops its kernels and removes what it staged (exit 130 or 143).
- `held`: while a swap of renames completes, both are recorded and delivered afterwards, so a
  notebook is never left half swapped.

Kernels run in worker threads, where nbclient installs no handlers of its own.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from .errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def as_interrupts():
    """SIGTERM handled like SIGINT: both raise Interrupted in the main thread (handlers restored after)."""

    def handler(signum, frame):
        raise Interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def held():
    """Hold SIGINT and SIGTERM back while the block runs; deliver the first one after.

    Python runs signal handlers in the main thread whichever thread the signal lands on, so the
    handlers themselves are swapped for one that only records the signal (main thread only).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum)) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])
