"""``python -m estratos`` runs the command line."""

from estratos.cli import main

main()
