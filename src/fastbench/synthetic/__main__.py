"""``python -m fastbench.synthetic``: the synthetic server on its own."""

import sys

from fastbench.synthetic.cli import main

sys.exit(main())
