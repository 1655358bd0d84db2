"""Execute one notebook with nbclient, inside the virtual environment that runs this script.

    python run_notebook_in_venv.py NOTEBOOK.ipynb REPORT.json

Run it with another environment's python (the NumPy-only one of the browser edition, the reader's
one of tests/reader) so the notebook sees only what is installed there. Before and after the notebook's own cells it adds a probe cell that records the
kernel's interpreter and the modules loaded at that point; REPORT.json gets the probes, the
notebook's execution time and its printed and displayed text.
"""

import importlib.util
import json
import sys
import time

import nbformat
from nbclient import NotebookClient

PROBE = """\
import importlib.util as _probe_util, json as _probe_json, sys as _probe_sys, time as _probe_time
print("PROBE" + _probe_json.dumps({
    "time": _probe_time.time(),
    "executable": _probe_sys.executable,
    "prefix": _probe_sys.prefix,
    "torch_importable": _probe_util.find_spec("torch") is not None,
    "modules": sorted(_probe_sys.modules),
}))
"""


def probe_result(cell):
    text = "".join(out.get("text", "") for out in cell.outputs if out.get("output_type") == "stream")
    return json.loads(text.split("PROBE", 1)[1])


def main(notebook_path, report_path):
    nb = nbformat.read(notebook_path, as_version=4)
    own_cells = len(nb.cells)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = NotebookClient(nb, kernel_name="python3", timeout=120, startup_timeout=120,
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    own = nb.cells[1:-1]
    assert len(own) == own_cells
    # What the reader sees as text, in order: printed streams and the text of displayed outputs
    # (say() and say_table() display Markdown whose text/plain is the same text).
    stdout = "".join(
        out.get("text", "") if out.get("output_type") == "stream" else out["data"]["text/plain"] + "\n"
        for cell in own if cell.cell_type == "code"
        for out in cell.outputs
        if out.get("output_type") == "stream" or (out.get("output_type") == "display_data" and "text/plain" in out.get("data", {}))
    )
    markdown = "".join(  # what say() and say_table() display
        out.get("data", {}).get("text/markdown", "") + "\n" for cell in own if cell.cell_type == "code"
        for out in cell.outputs if out.get("output_type") in ("display_data", "execute_result")
    )
    errors = [out for cell in own if cell.cell_type == "code"
              for out in cell.outputs if out.get("output_type") == "error"]
    report = {
        "runner_executable": sys.executable,
        "runner_prefix": sys.prefix,
        "runner_torch_importable": importlib.util.find_spec("torch") is not None,
        "before": probe_result(nb.cells[0]),
        "after": probe_result(nb.cells[-1]),
        "wall_seconds_with_kernel_start": wall,
        "notebook_seconds": probe_result(nb.cells[-1])["time"] - probe_result(nb.cells[0])["time"],
        "code_cells": sum(cell.cell_type == "code" for cell in own),
        "stdout": stdout,
        "markdown": markdown,
        "errors": errors,
    }
    with open(report_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
