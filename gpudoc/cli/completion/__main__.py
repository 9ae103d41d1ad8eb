"""`python -m gpudoc.cli.completion --write`: regenerate the scripts in ``completions/``."""

import sys

from gpudoc.cli.completion.scripts import main

sys.exit(main())
