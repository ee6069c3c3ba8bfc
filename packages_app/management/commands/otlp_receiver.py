"""`manage.py otlp_receiver --port 4317`: the OTLP/gRPC receiver mesh-llm nodes export decode spans to."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.web.otlp_grpc import build_server


class Command(BaseCommand):
    help = "Serve OTLP/gRPC (TraceService) for mesh-llm nodes; stage.openai_decode spans become reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=4317)
        parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
        parser.add_argument("--workers", type=int, default=4, help="concurrent exports")

    def handle(self, *args: Any, **options: Any) -> None:
        server, port = build_server(options["host"], options["port"], options["workers"])
        if port == 0:
            raise CommandError(f"Cannot listen on {options['host']}:{options['port']} (in use?).")
        server.start()
        self.stdout.write(f"OTLP/gRPC receiver on {options['host']}:{port}", ending="\n")
        self.stdout.flush()
        try:
            server.wait_for_termination()
        except KeyboardInterrupt:
            server.stop(grace=5).wait()
