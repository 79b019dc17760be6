import sys

from evolve.app.cli import main

sys.exit(main())
