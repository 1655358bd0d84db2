"""Entry point that works from a plain checkout: python scripts/build-learning-notebooks.py --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from learning_notebooks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
