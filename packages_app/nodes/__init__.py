"""Serving nodes: identity and tokens (identity.py, Django), the report schema and OTLP decoding (pure),
and the node agent (no Django). This package file imports nothing, so the agent loads without Django.
"""
