"""devnode: a local imitation of a mesh-llm node (console API, OpenAI endpoint, OTLP span export).

For the demo and the tests, as devhub imitates the Hub. Its payloads follow docs/node-report.md, which
cites mesh-llm's source; the imitation follows mesh-llm, never the other way round. No Django.
"""
