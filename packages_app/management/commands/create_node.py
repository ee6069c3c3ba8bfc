"""`manage.py create_node NAME`: register a serving node; its token is the last line printed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.nodes.identity import NodeError, create_node


class Command(BaseCommand):
    help = "Create a node allowed to post reports and print its token (shown once, last line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = create_node(options["name"])
        except NodeError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Created node {issued.node.name!r}. Its token is shown only now:")
        # Last line, alone, so scripts can take it with `tail -n 1`.
        self.stdout.write(issued.token)
