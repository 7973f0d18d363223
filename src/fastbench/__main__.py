import sys

from fastbench.cli import main

sys.exit(main())
