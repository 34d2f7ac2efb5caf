"""The app package's two icons, drawn by code (no image library needed): ``python -m adapters.teams.icons``.

Teams wants a 192x192 full-colour icon and a 32x32 outline icon (white on transparent). Both show a
check mark: countersign is about approvals.
"""

from __future__ import annotations

import math
import struct
import sys
import zlib
from pathlib import Path

ACCENT = (46, 92, 138)
WHITE = (255, 255, 255)
CHECK = ((0.26, 0.52), (0.44, 0.70), (0.76, 0.32))
"""The check mark's corners, as fractions of the icon's size."""


def png_bytes(width: int, height: int, rgba: list[tuple[int, int, int, int]]) -> bytes:
    """A minimal RGBA PNG (8 bits per channel, no filtering)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(
        b"\x00" + b"".join(struct.pack("4B", *rgba[y * width + x]) for x in range(width)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def _distance_to_check(x: float, y: float, size: int) -> float:
    points = [(px * size, py * size) for px, py in CHECK]
    best = math.inf
    for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
        dx, dy = bx - ax, by - ay
        t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
        best = min(best, math.hypot(x - (ax + t * dx), y - (ay + t * dy)))
    return best


def draw(size: int, thickness: float, background: tuple[int, int, int] | None) -> bytes:
    """A check mark of ``thickness`` pixels, white, on ``background`` (``None``: transparent)."""
    pixels = []
    for y in range(size):
        for x in range(size):
            # Anti-aliased edge: full coverage inside the stroke, fading over one pixel.
            coverage = max(0.0, min(1.0, thickness / 2 - _distance_to_check(x + 0.5, y + 0.5, size) + 0.5))
            if background is None:
                pixels.append((*WHITE, round(255 * coverage)))
            else:
                mixed = tuple(round(b + (w - b) * coverage) for b, w in zip(background, WHITE, strict=True))
                pixels.append((*mixed, 255))
    return png_bytes(size, size, pixels)


def write_icons(folder: Path) -> None:
    """Write ``color.png`` (192x192) and ``outline.png`` (32x32) into ``folder``."""
    (folder / "color.png").write_bytes(draw(192, 22, ACCENT))
    (folder / "outline.png").write_bytes(draw(32, 3.5, None))


if __name__ == "__main__":
    write_icons(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "appPackage")
