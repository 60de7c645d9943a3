"""MCP servers as tool providers (see `_pool.py`): one live `ClientSession` per server, and
each tool call past it on the transport's lane (`_lane.Lane`; `_stdio`, `_http` and `_sse`
are its siblings). A long reply is taken in as it arrives (`_spool`, `_long_json`)."""

from ._pool import ServerPool, convert_result

__all__ = ["ServerPool", "convert_result"]
