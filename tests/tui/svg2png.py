"""SVG screenshots (Textual's `save_screenshot`) to PNG, rendered with DejaVu Sans Mono.

Textual's SVGs name Fira Code from a web font; offline renderers fall back to whatever monospace
font they find, so the font is set to DejaVu Sans Mono (installed with fonts-dejavu-core)."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def svg_to_png(svg: Path, png: Path, scale: float = 1.0) -> Path:
    import cairosvg

    text = svg.read_text(encoding="utf-8")
    text = re.sub(r"@font-face\s*\{[^}]*\}", "", text)
    text = text.replace('font-family: "Fira Code"', 'font-family: "DejaVu Sans Mono"')
    text = text.replace("font-family: Fira Code, monospace", 'font-family: "DejaVu Sans Mono", monospace')
    cairosvg.svg2png(bytestring=text.encode("utf-8"), write_to=str(png), scale=scale)
    return png


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        print(svg_to_png(path, path.with_suffix(".png")))
