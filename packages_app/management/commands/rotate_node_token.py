"""`manage.py rotate_node_token NAME`: replace a node's token; the new one is the last line printed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.nodes.identity import NodeError, get_node, rotate_node_token


class Command(BaseCommand):
    help = "Give a node a new token (the old one stops working at once) and print it, last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = rotate_node_token(get_node(options["name"]))
        except NodeError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"New token for node {issued.node.name!r}; the old one no longer works:")
        self.stdout.write(issued.token)
