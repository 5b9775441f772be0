// Open a single-file Allure 3 report in Debian's Chromium (driven by playwright-core), the way a
// reviewer would: the global "Summary table" attachment, then one test's plot attachment.
// Attachments are collapsed until clicked, so a plain --dump-dom cannot show them.
//
//   node browse_report.mjs INDEX_HTML OUT_DIR TEST_TITLE PLOT_NAME [GROUP ...]
//
// GROUP... are the tree nodes to open before TEST_TITLE (e.g. p1 fp8-rollout "against parent").
// Prints one JSON object: what was found (table headers and rows, the plot's pixel size) and the
// screenshots written to OUT_DIR. Exits 1 with {"error": ...} when a step fails.
import { chromium } from "playwright-core";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [indexHtml, outDir, testTitle, plotName, ...groups] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const found = { screenshots: [] };
const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

// An attachment's header row holds its title and, last, the download and expand buttons.
function attachmentHeader(page, title) {
  return page.getByTestId("test-result-attachment-header").filter({ has: page.getByText(title, { exact: true }) }).first();
}

const page = await browser.newPage({ viewport: { width: 1920, height: 1080 } });
try {
  await page.goto(pathToFileURL(indexHtml).href, { waitUntil: "load" });
  // The single-file report unpacks its embedded data after load and then sets this flag.
  await page.waitForFunction(() => window.allureReportDataReady === true, null, { timeout: 60000 });

  // 1. The summary table: report-wide (global) attachments. Its text from the Markdown version
  // (rendered into a sandboxed iframe), its picture from the PNG version, opened full-size.
  await page.getByText("Global Attachments", { exact: false }).first().click({ timeout: 30000 });
  const markdownHeader = attachmentHeader(page, "Summary table (Markdown)");
  await markdownHeader.click();
  const table = page.frameLocator("iframe").last().locator("table").first();
  await table.waitFor({ timeout: 15000 });
  found.summary = {
    headers: await table.locator("th").allInnerTexts(),
    rows: await table.locator("tbody tr").evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.innerText))),
  };
  await markdownHeader.click();  // collapse it again
  const pngHeader = attachmentHeader(page, "Summary table");
  await pngHeader.click();
  const buttons = pngHeader.locator("button");
  await buttons.nth((await buttons.count()) - 2).click();  // "expand": the attachment in a dialog
  const summaryImage = page.locator("img").filter({ visible: true }).last();
  await summaryImage.waitFor({ timeout: 15000 });
  await page.waitForFunction((img) => img.complete && img.naturalWidth > 0, await summaryImage.elementHandle());
  found.summary.image = await summaryImage.evaluate((img) => ({ width: img.naturalWidth, height: img.naturalHeight }));
  const summaryShot = path.join(outDir, "report-screenshot.png");
  await page.screenshot({ path: summaryShot });
  found.screenshots.push(summaryShot);
  await page.keyboard.press("Escape");

  // 2. A plot: open the test in the tree, then its PNG attachment.
  await page.getByText(/^Results/).first().click();
  for (const group of groups) {
    await page.getByText(group, { exact: true }).first().click({ timeout: 15000 });
  }
  await page.getByText(testTitle, { exact: true }).first().click({ timeout: 15000 });
  const plotHeader = attachmentHeader(page, plotName);
  await plotHeader.scrollIntoViewIfNeeded({ timeout: 15000 });
  await plotHeader.click();
  const image = page.locator("img").filter({ visible: true }).last();
  await image.waitFor({ timeout: 15000 });
  await page.waitForFunction((img) => img.complete && img.naturalWidth > 0, await image.elementHandle());
  found.plot = await image.evaluate((img) => ({ width: img.naturalWidth, height: img.naturalHeight, alt: img.alt }));
  await image.scrollIntoViewIfNeeded();
  await plotHeader.evaluate((el) => el.scrollIntoView({ block: "start" }));
  const plotShot = path.join(outDir, "report-plot-screenshot.png");
  await page.screenshot({ path: plotShot });
  found.screenshots.push(plotShot);
  console.log(JSON.stringify(found));
} catch (err) {
  const errorShot = path.join(outDir, "report-error.png");
  await page.screenshot({ path: errorShot }).catch(() => {});
  console.log(JSON.stringify({ ...found, error: String(err.message || err).split("\n")[0], errorShot }));
  process.exitCode = 1;
} finally {
  await browser.close();
}
