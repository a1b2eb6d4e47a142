"""Open a report in headless Chromium and read back which plots rendered (report.html marks them)."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Set, Tuple

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
MISSING_REASON = "needs Chromium (apt-get install -y chromium chromium-driver)"


def rendered_plots(report: Path, timeout: float = 90.0) -> Tuple[int, Set[str], Set[str], str]:
    """(number of plots, ids that rendered, ids that did not, the DOM) after the page's load event."""
    with tempfile.TemporaryDirectory(prefix="tb-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=10000", "--dump-dom", report.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout)
    dom = proc.stdout
    m = re.search(r'<div id="plot-check"([^>]*)>', dom)
    if not m:
        raise AssertionError(f"no plot-check marker in the DOM (chromium exit {proc.returncode}): "
                             f"{proc.stderr[-2000:]}")
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', m.group(1)))
    return int(attrs["data-total"]), set(attrs["data-ok"].split()), set(attrs["data-failed"].split()), dom


def external_urls(html: str) -> Set[str]:
    """Every http(s) URL the page would load (src/href/url()), which a self-contained report has none of."""
    found = set(re.findall(r'(?:src|href)\s*=\s*["\']((?:https?:)?//[^"\']+)', html))
    found |= set(re.findall(r'url\(\s*["\']?((?:https?:)?//[^)"\']+)', html))
    return found


def chromium_or_none() -> Optional[str]:
    return CHROMIUM
