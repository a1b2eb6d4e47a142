"""What every self-contained HTML page of the analysis shares: escaping, plots as embedded PNGs, and the
marker a headless browser reads to tell which plots rendered (tests/spark/spark_browser.py)."""
from __future__ import annotations

import base64
import html
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["escape", "png", "PLOT_CHECK_SCRIPT"]

PLOT_CHECK_SCRIPT = """
<script>
// Marks which plots rendered (used by the headless-browser test, harmless otherwise).
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('.plot'), ok = [], bad = [];
  plots.forEach(function (p) {
    var good = false;
    if (p.tagName.toLowerCase() === 'img') { good = p.complete && p.naturalWidth > 0 && p.naturalHeight > 0; }
    else { try { var b = p.getBBox(); good = b.width > 0 && b.height > 0; } catch (e) { good = false; } }
    (good ? ok : bad).push(p.id);
  });
  var m = document.createElement('div');
  m.id = 'plot-check'; m.setAttribute('data-total', plots.length);
  m.setAttribute('data-ok', ok.join(' ')); m.setAttribute('data-failed', bad.join(' '));
  m.style.display = 'none'; document.body.appendChild(m);
});
</script>
"""


def escape(x) -> str:
    return html.escape("" if x is None else str(x))


#: the plots' resolution (dots per inch)
DPI = 90


def png(fig, plot_id: str, alt: str) -> str:
    """The figure as an ``<img class="plot">`` with the PNG inline; the figure is closed.

    Cropped to what it shows, as ``savefig(bbox_inches="tight")`` crops, and the same pixels, but drawn once:
    "tight" draws the whole figure a first time (without painting) to find its extent, which every artist here
    gives without a draw (no layout engine), and that first draw was a third of a report's plotting time."""
    buf = io.BytesIO()
    if fig.get_layout_engine() is None:
        fig.set_dpi(DPI)
        box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    else:
        box = "tight"
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches=box)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" id="{plot_id}" alt="{escape(alt)}" src="data:image/png;base64,{data}">'
