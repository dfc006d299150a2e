"""``python -m companyd`` runs the CLI."""

from companyd.cli import main

raise SystemExit(main())
