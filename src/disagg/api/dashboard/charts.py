"""Charts as SVG, drawn on the server by matplotlib: no script and nothing fetched from elsewhere.

Each series is a line with a marker per data point; its SVG group has the id `<chart>-<series>`, so
a test (or a person with the inspector) finds the points of one series. Text stays text in the SVG
(`svg.fonttype: none`): smaller, and the browser draws it with the page's font.
"""

from __future__ import annotations

import io
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC

#: Colours for the series, in order (matplotlib's default cycle, colour-blind safe enough).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")

Series = Mapping[str, Sequence[tuple[float, float]]]


def slug(text: str) -> str:
    """A name as an SVG/HTML id part: letters, digits and '-' only."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _day(epoch: float) -> float:
    """Epoch seconds as matplotlib's date number (days since its epoch, 1970-01-01)."""
    return epoch / 86400.0


#: The colour of a fault's and of a repair's marker line.
MARK_COLOURS = {"fault": "#d62728", "repair": "#2ca02c", "failover": "#9467bd"}


def line_chart(chart_id: str, title: str, unit: str, series: Series, span: tuple[float, float],
               capacity: Collection[str] = (), marks: Sequence[tuple[float, str]] = (), counts: bool = False) -> str:
    """An SVG line chart of `series` (name → [(epoch seconds, value)]) over `span`, as inline SVG text.

    A series named in `capacity` is a capacity line: dashed, without markers, in the colour of the series
    it bounds (the one whose name it begins with). `marks` are vertical lines at (time, kind), kind "fault",
    "repair" or "failover", each in an SVG group `<chart>-mark-<kind>-<n>`. A chart of `counts` has
    whole-number ticks only."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.dates as mdates
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": chart_id}):
        fig = Figure(figsize=(6.4, 2.3), dpi=100)
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        colour: dict[str, str] = {}
        for name in series:
            if name not in capacity:
                colour[name] = COLOURS[len(colour) % len(COLOURS)]
        for name, points in series.items():
            xs = [_day(t) for t, _ in points]
            bound = next((n for n in colour if name.startswith(n)), None)
            style = ({"linestyle": "--", "linewidth": 1.0, "color": colour.get(bound or "", "#7f7f7f")}
                     if name in capacity else
                     {"marker": "o", "markersize": 2.5, "linewidth": 1.4, "color": colour[name]})
            (line,) = ax.plot(xs, [v for _, v in points], label=name, **style)  # type: ignore[arg-type]
            line.set_gid(f"{chart_id}-{slug(name)}")
        for n, (at, kind) in enumerate(marks):
            mark = ax.axvline(_day(at), color=MARK_COLOURS.get(kind, "#7f7f7f"), linewidth=1.0, alpha=0.8,
                              linestyle=":")
            mark.set_gid(f"{chart_id}-mark-{kind}-{n}")
        ax.set_xlim(_day(span[0]), _day(span[1]))
        ax.set_ylim(bottom=0)
        if counts:
            from matplotlib.ticker import MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(tz=UTC))  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_formatter(mdates.DateFormatter(  # type: ignore[no-untyped-call]
            "%H:%M:%S" if span[1] - span[0] < 600 else "%H:%M", tz=UTC))
        ax.set_ylabel(unit)
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=min(4, len(series)))
        fig.tight_layout()
        out = io.StringIO()
        fig.savefig(out, format="svg")
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]  # inline: no XML declaration or DOCTYPE
    return svg.replace("<svg ", f'<svg id="{chart_id}" role="img" aria-label="{title}" ', 1)


__all__ = ["COLOURS", "MARK_COLOURS", "line_chart", "slug"]
