"""`python -m learning_notebooks`: the build-learning-notebooks command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
