// Open the experiment page (reports/experiment/index.html) in Debian's Chromium, driven by
// playwright-core, at 1400 x 1000 as a reviewer's first screen, with scripts off (the page needs none).
//
//   node browse_experiment.mjs INDEX_HTML SCREENSHOT_PNG
//
// Prints one JSON object: the viewport, the summary table (headers, rows, each row's bottom edge),
// the ladder figure's box and mark count, the A/B items' boxes and visible text. Exits 1 with {"error": ...}.
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const [indexHtml, screenshot] = process.argv.slice(2);
const viewport = { width: 1400, height: 1000 };
let browser;
try {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport, javaScriptEnabled: false });
  await page.goto(pathToFileURL(indexHtml).href, { waitUntil: "load" });
  const found = await page.evaluate(() => {
    const box = (el) => { const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, width: r.width, height: r.height }; };
    const table = document.querySelector("#summary");
    const svg = document.querySelector("svg.ladder");
    return {
      summary: table && {
        headers: [...table.querySelectorAll("thead th")].map((th) => th.innerText.replace(/\s+/g, " ").trim()),
        rows: [...table.querySelectorAll("tbody tr")].map((tr) => ({ cells: [...tr.cells].map((c) => c.innerText.trim()), ...box(tr) })),
      },
      figure: svg && { ...box(svg), marks: svg.querySelectorAll("path, use").length, text: svg.textContent.replace(/\s+/g, " ") },
      // Each answer: its first line (the question), all its visible text (closed evidence is not
      // rendered, so not in innerText) and whether its evidence starts folded.
      ab: [...document.querySelectorAll("#ab li")].map((li) => ({
        text: li.innerText.split("\n")[0],
        shown: li.innerText.replace(/\s+/g, " "),
        folded: [...li.querySelectorAll("details")].every((d) => !d.open),
        ...box(li),
      })),
      scrollWidth: document.documentElement.scrollWidth,
    };
  });
  await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({ viewport, screenshot, ...found }));
} catch (err) {
  console.log(JSON.stringify({ error: String(err.message || err).split("\n")[0] }));
  process.exitCode = 1;
} finally {
  await browser?.close();
}
