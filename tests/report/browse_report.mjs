// Open a single-file Allure 3 report in Debian's Chromium (driven by playwright-core), the way a
// reviewer would: the global "Summary table" attachment, then one test's plot attachment.
// Attachments are collapsed until clicked, so a plain --dump-dom cannot show them.
//
//   node browse_report.mjs INDEX_HTML OUT_DIR TEST_TITLE PLOT_NAME [GROUP ...]
//
// GROUP... are the tree nodes to open before TEST_TITLE (e.g. p1 fp8-rollout "against parent").
// Prints one JSON object: what was found (table headers and rows, the plot's pixel size) and the
// screenshots written to OUT_DIR. Exits 1 with {"error": ...} when a step fails.
import path from "node:path";
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const [indexHtml, outDir, testTitle, plotName, ...groups] = process.argv.slice(2);
const found = { screenshots: [] };
// Each step names itself, so a failure says where it stopped ("step: error").
let step = "open the report";
const firstLine = (err) => String(err.message || err).split("\n")[0];
let browser, page;
try {
  ({ browser, page } = await openReport(indexHtml));
} catch (err) {
  console.log(JSON.stringify({ ...found, error: `${step}: ${firstLine(err)}` }));
  process.exit(1);
}

// Open the report and wait until the app has unpacked its data and drawn its tree; when it
// never does, say what the page showed and logged.
async function openReport(indexHtml) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1920, height: 1080 } });
  // What the page said, for the error when it never renders.
  const said = [];
  page.on("console", (m) => m.type() === "error" && said.push(`console: ${m.text().slice(0, 200)}`));
  page.on("pageerror", (e) => said.push(`page error: ${String(e).slice(0, 300)}`));
  try {
    await page.goto(pathToFileURL(indexHtml).href, { waitUntil: "load" });
    // The single-file report sets this flag once its embedded data is unpacked.
    await page.waitForFunction(() => window.allureReportDataReady === true, null, { timeout: 60000 });
    await page.getByText("Global Attachments", { exact: false }).first().waitFor({ timeout: 60000 });
  } catch (err) {
    const shown = await page.evaluate(() => document.body?.innerText ?? "").catch(() => "");
    await browser.close();
    throw new Error(`${firstLine(err)} | page shows: ${JSON.stringify(shown.slice(0, 300))} | ${said.join(" | ")}`);
  }
  return { browser, page };
}

// An attachment's header row holds its title and, last, the download and expand buttons.
function attachmentHeader(page, title) {
  return page.getByTestId("test-result-attachment-header").filter({ has: page.getByText(title, { exact: true }) }).first();
}

try {
  // 1. The summary table: report-wide (global) attachments. Its text from the Markdown version
  // (rendered into a sandboxed iframe), its picture from the PNG version, opened full-size.
  step = "open Global Attachments";
  await page.getByText("Global Attachments", { exact: false }).first().click({ timeout: 30000 });
  step = "open the Markdown summary table";
  const markdownHeader = attachmentHeader(page, "Summary table (Markdown)");
  await markdownHeader.click();
  const table = page.frameLocator("iframe").last().locator("table").first();
  await table.waitFor({ timeout: 15000 });
  found.summary = {
    headers: await table.locator("th").allInnerTexts(),
    rows: await table.locator("tbody tr").evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.innerText))),
  };
  step = "open the PNG summary table full-size";
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
  step = "close the full-size dialog";
  await page.keyboard.press("Escape");
  // The dialog's backdrop would swallow the next click until it is gone.
  await page.getByRole("dialog").waitFor({ state: "hidden", timeout: 15000 });

  // 2. A plot: open the test in the tree, then its PNG attachment.
  step = "open the tree at " + [...groups, testTitle].join(" > ");
  await page.getByText(/^Results/).first().click();
  for (const group of groups) {
    await page.getByText(group, { exact: true }).first().click({ timeout: 15000 });
  }
  await page.getByText(testTitle, { exact: true }).first().click({ timeout: 15000 });
  step = `open the plot "${plotName}"`;
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
  console.log(JSON.stringify({ ...found, error: `${step}: ${firstLine(err)}`, errorShot }));
  process.exitCode = 1;
} finally {
  await browser.close();
}
