import sys

from evolve.app.commands.cli import main

sys.exit(main())
