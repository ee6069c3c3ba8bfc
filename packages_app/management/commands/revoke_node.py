"""`manage.py revoke_node NAME`: stop a node's token from working; its reports stay."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.nodes.identity import NodeError, get_node, revoke_node


class Command(BaseCommand):
    help = "Revoke a node's token (rotate_node_token gives it a new one)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            node = get_node(options["name"])
        except NodeError as exc:
            raise CommandError(str(exc)) from None
        revoke_node(node)
        self.stdout.write(f"Revoked node {node.name!r}; its token no longer works.")
