"""Two fixes to Allure 3.18's single-file report (`allure awesome --single-file`), applied to its
index.html after it is built.

1. A start-up race. The app's script comes first in <body>; the data (`window.allureReportData`,
   3-4 MB of base64) is declared by a script at the end. Chromium parses a page that size in
   chunks and runs timers in between, so the app can ask for its data before
   `window.allureReportData` exists; Allure's `reportDataUrl` then falls back to fetching
   `widgets/*.json` from file://, which CORS blocks, and the page stays blank ("Failed to fetch
   tree filters data"). Seen in 2 of 8 loads with the two cores busy (2026-11-29), and once in CI.
   Declaring the (empty) data object in <head> closes the gap: every request then goes through
   `loadReportData`, which waits for `allureReportDataReady`. Allure's own data script keeps
   the object (`window.allureReportData = window.allureReportData || {}`).
2. Analytics. The awesome plugin embeds a Google Analytics tag unconditionally (it ignores
   ALLURE_NO_ANALYTICS, which only the allure2 plugin reads). An experiment record opened from
   disk should not call out, so the tag's two scripts are removed.
"""

from __future__ import annotations

import re
from pathlib import Path

DECLARE_DATA_EARLY = "<script>window.allureReportData = window.allureReportData || {}; window.allureReportDataReady = false;</script>"
# The loader tag and the inline gtag() config that follows it.
ANALYTICS = re.compile(
    r'<script async src="https://www\.googletagmanager\.com/gtag/js[^"]*"></script>\s*'
    r"<script>\s*window\.dataLayer = .*?</script>",
    re.DOTALL,
)


def fix_single_file_report(index: Path) -> list[str]:
    """Apply both fixes in place; returns what was changed (empty when the page is not the
    single-file report this was written for, e.g. a multi-file report holds no data script)."""
    html = index.read_text(encoding="utf-8")
    changed = []
    if "window.allureReportData = window.allureReportData || {};" in html and DECLARE_DATA_EARLY not in html:
        html = html.replace("<head>", "<head>\n    " + DECLARE_DATA_EARLY, 1)
        changed.append("report data declared in <head>")
    html, removed = ANALYTICS.subn("", html, count=1)
    if removed:
        changed.append("analytics tag removed")
    if changed:
        index.write_text(html, encoding="utf-8")
    return changed
