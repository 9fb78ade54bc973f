"""Byte-level encodings shared by the record format and the request/response messages.

``varint``: zigzag varints and unsigned LEB128 (the record format's lengths and deltas, and the compact lengths of
flexible message versions); ``wire``: the fixed-width primitives, strings, bytes, arrays and tagged fields of the
wire protocol. Both are sans-IO and import nothing else of the project but :mod:`broker_runtime.errors`, so the
record codec and the message definitions can both build on them without importing each other.
"""
