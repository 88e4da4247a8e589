"""`python -m sparkdeck` runs the same entry point as the `sparkdeck` console script."""

from sparkdeck.entry import main

raise SystemExit(main())
