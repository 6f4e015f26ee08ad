"""A PNG of a real terminal: what a tmux pane shows (`tmux capture-pane -e`, its colours included), drawn cell by cell
in a monospace font. docs/cli.md's screen captures are made so:

    tmux new-session -d -s cap -x 110 -y 24
    tmux send-keys -t cap 'ringleader submit examples/train_custom.py --watch -- --steps 3000' Enter
    python -m ringleader_devcluster.screencap cap docs/images/cli-watch.png

The ANSI escapes are read by rich (`Text.from_ansi`) and drawn with matplotlib (a Figure saved as PNG, no display).
"""

from __future__ import annotations

import argparse
import subprocess
from itertools import pairwise
from pathlib import Path

from matplotlib.figure import Figure
from rich.style import Style
from rich.text import Text

BACKGROUND, FOREGROUND = "#1e1e1e", "#d4d4d4"
FONT, SIZE, DPI = "DejaVu Sans Mono", 12.0, 100
ADVANCE, LINE = 0.602, 1.25  # DejaVu Sans Mono's advance, and the line height, in ems
PAD = 12  # pixels around the text


def capture(session: str) -> list[str]:
    """The pane's visible lines with their escapes, trailing blank lines dropped."""
    out = subprocess.run(["tmux", "capture-pane", "-e", "-p", "-t", session], capture_output=True, text=True,
                         check=True, timeout=10).stdout  # fmt: skip
    lines = out.rstrip("\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _color(style: Style, default: str) -> str:
    if style.color is None or style.color.is_default:
        return default
    r, g, b = style.color.get_truecolor()
    return f"#{r:02x}{g:02x}{b:02x}"


def render(lines: list[str], path: Path, columns: int | None = None) -> None:
    """Draw `lines` (text with ANSI escapes) as a terminal `columns` wide (default: the longest line)."""
    texts = [Text.from_ansi(line) for line in lines]
    width = columns or max((len(t.plain) for t in texts), default=1)
    em = SIZE * DPI / 72
    cell, height = em * ADVANCE, em * LINE
    w_px, h_px = width * cell + 2 * PAD, len(texts) * height + 2 * PAD
    fig = Figure(figsize=(w_px / DPI, h_px / DPI), dpi=DPI, facecolor=BACKGROUND)
    for row, text in enumerate(texts):
        y = 1 - (PAD + row * height) / h_px
        for start, end, style in _runs(text):
            fig.text(
                (PAD + start * cell) / w_px, y, text.plain[start:end], color=_color(style, FOREGROUND),
                family=FONT, size=SIZE, weight="bold" if style.bold else "normal", va="top", ha="left",
            )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor=BACKGROUND)


def _runs(text: Text) -> list[tuple[int, int, Style]]:
    """The line cut where its style changes, each piece with its combined style (blank pieces left out)."""
    cuts = sorted({0, len(text.plain), *(s.start for s in text.spans), *(s.end for s in text.spans)})
    runs = []
    for start, end in pairwise(cuts):
        if not text.plain[start:end].strip():
            continue
        style = Style()
        for span in text.spans:
            if span.start <= start and end <= span.end:
                style += span.style if isinstance(span.style, Style) else Style.parse(span.style)
        runs.append((start, end, style))
    return runs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="screencap", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("session", help="the tmux session (or pane) to capture")
    p.add_argument("png", type=Path)
    p.add_argument("--columns", type=int, help="the terminal's width (default: the longest line)")
    args = p.parse_args(argv)
    render(capture(args.session), args.png, args.columns)
    print(f"[screencap] wrote {args.png}")


if __name__ == "__main__":
    main()
