"""Colours of the pictures: a palette that does not repeat, and text that stays readable on it.

Coordinates 0-9 get the Tableau 10 colours; later ones walk the hue circle by the golden angle
at three lightness levels, so any number of coordinates gets distinct colours. Text on a cell is
black or white, whichever contrasts more with the cell by WCAG 2's relative luminance; that
choice always reaches at least 4.5:1, the WCAG AA level for normal text.

>>> palette(3)
['#4e79a7', '#f28e2b', '#59a14f']
>>> text_on("#edc948"), text_on("#1f3b73")
('#000000', '#ffffff')
"""

from __future__ import annotations

import colorsys

__all__ = ["contrast", "luminance", "palette", "text_on"]

_TABLEAU = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
_GOLDEN_ANGLE = 137.50776405003785
_LIGHTNESS = (0.55, 0.72, 0.38)
_BLACK, _WHITE = "#000000", "#ffffff"


def _colour(index: int) -> str:
    """The colour of coordinate ``index`` (see the module docstring)."""
    if index < len(_TABLEAU):
        return _TABLEAU[index]
    step = index - len(_TABLEAU)
    hue = (step * _GOLDEN_ANGLE % 360.0) / 360.0
    lightness = _LIGHTNESS[(step // 7) % len(_LIGHTNESS)]
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.62)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (red, green, blue))


def palette(count: int) -> list[str]:
    """``count`` colours as ``#rrggbb``, one per coordinate, all distinct."""
    colours: list[str] = []
    seen: set[str] = set()
    index = 0
    while len(colours) < count:
        colour = _colour(index)
        index += 1
        if colour not in seen:  # rounding could in principle meet an earlier colour
            seen.add(colour)
            colours.append(colour)
    return colours


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb`` (0 black to 1 white)."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""
    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def text_on(background: str) -> str:
    """Black or white, whichever reads better on ``background``."""
    if contrast(background, _BLACK) >= contrast(background, _WHITE):
        return _BLACK
    return _WHITE
