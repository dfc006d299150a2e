"""``python -m companyd`` runs the CLI."""

from companyd.cli.main import main

raise SystemExit(main())
