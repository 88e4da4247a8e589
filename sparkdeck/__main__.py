"""`python -m sparkdeck` runs the same entry point as the `sparkdeck` console script."""

from sparkdeck.cli import main

raise SystemExit(main())
