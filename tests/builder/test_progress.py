"""Progress lines: rewritten in place on a terminal, one plain line per cell otherwise (CI logs)."""

from __future__ import annotations

import io

from learning_notebooks.execute import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_progress_rewrites_one_line():
    stream = Terminal()
    progress = Progress("demo/hello", 3, stream)
    progress.cell(1, "01_intro.py:9")
    progress.cell(2, "02_compute.py:9")
    progress.done()
    assert stream.getvalue() == (
        "\r\x1b[K  demo/hello: cell 1 of 3 (01_intro.py:9)"
        "\r\x1b[K  demo/hello: cell 2 of 3 (02_compute.py:9)"
        "\r\x1b[K"
    )


def test_plain_progress_writes_a_line_per_cell():
    stream = io.StringIO()
    progress = Progress("demo/hello", 3, stream)
    progress.cell(1, "01_intro.py:9")
    progress.done()
    assert stream.getvalue() == "  demo/hello: cell 1 of 3 (01_intro.py:9)\n"
