"""Segment logs on local disk: pure file I/O, no asyncio, no network."""
