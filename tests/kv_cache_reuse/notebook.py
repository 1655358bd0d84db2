"""The kv-cache-reuse notebook, whose code the tests exec in-process through `notebook_code` (prelude, the
notebook's setup, the sections it includes from `infra-benchmark/kv-cache`, then its own sections, with
parameter overrides after the parameters cell).

`run_with` runs the shared set-up and decoder plus only the section files a test needs (with their
dependencies), optionally with text edits applied to them, so that a bug injected into one section does not
pay for running every other one."""

from __future__ import annotations

from notebook_code import bilingual_stand_ins, code_cells

NOTEBOOK = "infra-benchmark/kv-cache-reuse"

# Files that every partial run needs: the prelude, parameters, environment, helpers, masks, decoder.
BASE = ("prelude.py", "01_setup.py", "injected-parameters", "01_setup_environment.py", "01_setup_helpers.py",
        "03_masks.py", "05_decoder.py")
# Each section file and the section files whose names it uses.
DEPENDS = {
    "02_prefix_cache.py": (),
    "03_prefix_serving.py": ("02_prefix_cache.py",),
    "04_prefix_controls.py": ("02_prefix_cache.py", "03_prefix_serving.py"),
    "05_speculative.py": ("02_prefix_cache.py", "03_prefix_serving.py"),
    "06_split_k.py": (),
    "07_decode_cost.py": (),
    "08_roofline.py": ("06_split_k.py", "07_decode_cost.py"),
    "10_hf_gpt2_referee.py": (),
    "09_assisted_generation.py": ("02_prefix_cache.py", "03_prefix_serving.py", "05_speculative.py", "10_hf_gpt2_referee.py"),
}


def run_with(section: str, out_dir, edits=None, said=None) -> dict:
    """Exec the base files, `section`'s dependencies and `section` itself (all of them for "10_saved_results.py"
    and later), in notebook order, quick mode, with `edits` ({file: [(old, new)]}) applied; returns the namespace."""
    import os
    os.environ.setdefault("MPLBACKEND", "Agg")
    cells = code_cells(NOTEBOOK, edits=edits, QUICK=True, OUTPUT_DIR=str(out_dir))
    if section in DEPENDS:
        wanted = set(BASE) | set(DEPENDS[section]) | {section}
        cells = [(name, cell) for name, cell in cells if name in wanted]
    namespace: dict = {"__name__": "__notebook__"}
    stand_ins = bilingual_stand_ins(said if said is not None else [])
    for name, cell in cells:
        exec(compile(cell.source, name, "exec", dont_inherit=True), namespace)
        if name == "prelude.py":
            namespace.update(stand_ins)
    return namespace
