"""HTTP API (aiohttp), error mapping, Python client and the command-line tool."""
