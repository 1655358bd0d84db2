"""Stand-ins for the builder prelude's LANG, say() and say_table() (docs: /work/SPEC.md, item 2).

Used by tests that exec notebook code in-process while the builder's prelude is not available to
them. Both languages are required and the table cells must be strings, as in the prelude.
"""

from __future__ import annotations


def say(**texts):
    assert set(texts) == {"en", "zh"}, texts
    assert all(isinstance(t, str) and t for t in texts.values()), texts
    print(texts["en"])


def say_table(rows, **headers):
    assert set(headers) == {"en", "zh"} and len(headers["en"]) == len(headers["zh"]), headers
    assert all(len(row) == len(headers["en"]) and all(isinstance(c, str) for c in row) for row in rows), rows
    print(" | ".join(headers["en"]))
    for row in rows:
        print(" | ".join(row))


STAND_INS = {"LANG": "en", "say": say, "say_table": say_table}
