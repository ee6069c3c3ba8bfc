"""`manage.py inspect_gguf SOURCE [--json]`: one GGUF header from a path, an http(s) URL or hf://repo@rev/path."""

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app import hub, inspection


class Command(BaseCommand):
    help = "Print the GGUF header of a local file, an http(s) URL or hf://owner/repo@revision/path."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source")
        parser.add_argument("--json", action="store_true", help="print the header JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result, stats = inspection.inspect_header(options["source"])
        except hub.HubError as exc:
            self.stderr.write(f"error: {exc}")
            sys.exit(2)
        if result.header is None:
            self.stderr.write(f"error: {result.error}")
            sys.exit(1)
        doc = result.header.to_json()
        doc["fetch"] = {"requests": stats.requests, "bytes": stats.bytes}
        if options["json"]:
            self.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False))
            return
        header = result.header
        self.stdout.write(
            f"{options['source']}\n"
            f"  GGUF v{header.version} ({header.byte_order}-endian), alignment {header.alignment}\n"
            f"  architecture {header.architecture}, blocks {header.block_count}, "
            f"nextn_predict_layers {header.nextn_predict_layers}\n"
            f"  {len(header.kv)} keys, {len(header.tensors)} tensors, header {header.header_bytes} bytes\n"
            f"  fetched {stats.bytes} bytes in {stats.requests} requests"
        )
