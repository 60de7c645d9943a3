"""Fixture: a tool that returns a small real PNG image and a caption."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import struct
import zlib

from toolkernel._mcp_sdk import MCPServer
from toolkernel._mcp_sdk import Image

server = MCPServer("images")


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, built by hand so the fixture needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


@server.tool(structured_output=False)
def red_square(size: int = 4) -> list:
    """A red square of `size` pixels, and a caption."""
    return [Image(data=png(size, size, (255, 0, 0)), format="png"), f"a red square, {size}x{size} pixels"]


@server.tool(structured_output=False)
def broken_image() -> list:
    """An image whose data is not base64 (cut short), then a good one and a caption."""
    from toolkernel._mcp_sdk import types

    return [types.ImageContent(type="image", data="iVBORw0", mimeType="image/png"),
            Image(data=png(2, 2, (0, 0, 255)), format="png"), "a blue square, after a broken image"]


if __name__ == "__main__":
    server.run()
