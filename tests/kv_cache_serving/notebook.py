"""The kv-cache-serving notebook, whose code the tests exec through `notebook_code.run_notebook_code`
(prelude, this notebook's setup, the two sections it includes from `infra-benchmark/kv-cache`, then its
own sections, with parameter overrides after the parameters cell)."""

NOTEBOOK = "infra-benchmark/kv-cache-serving"


def section_prose(file: str) -> str:
    """The prose (both languages) of one of the notebook's section files, as the builder reads it."""
    from learning_notebooks.sources import load_config, load_notebook
    from notebook_code import SOURCES

    series, name = NOTEBOOK.split("/")
    section = next(s for s in load_notebook(SOURCES, series, name, load_config(SOURCES)).sections if s.file.name == file)
    return "\n".join(cell.source for cell in section.cells if cell.lang)


def assert_includable(file: str) -> None:
    """A section file that other notebooks include: no heading (it continues the section before it), and no
    section number in its prose."""
    prose = section_prose(file)
    assert "## " not in prose and "section" not in prose.lower() and "节" not in prose

