"""``python -m twin`` runs the CLI, like the ``twin`` script."""

from twin.cli import main

main()
