// thumbnail.mjs opens a WACZ's list of pages in ReplayWeb.page (its
// embedding with no url: the collection's pages) in headless Chromium,
// driven by puppeteer-core, waits until the entry of each page has
// loaded its thumbnail (an <img class="thumbnail"> in the entry's shadow
// DOM, from the archive's urn:thumbnail:PAGE) and prints as JSON each
// thumbnail's source and decoded size.
//
//   node thumbnail.mjs CHROMIUM EMBED_PAGE_URL TIMEOUT_MS
import puppeteer from "puppeteer-core";

const [chromium, embed, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg) || 60000;

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  const log = [];
  page.on("console", (m) => log.push(m.text()));
  await page.goto(embed, { waitUntil: "load", timeout });
  // The app's frame is /replay/?source=...#view=pages.
  const frame = await page.waitForFrame((f) => f.url().includes("/replay/?source="), { timeout });
  const img = await frame.waitForSelector("pierce/img.thumbnail", { timeout }).catch((e) => {
    throw new Error(`${e.message}; console ${JSON.stringify(log)}`);
  });
  // A thumbnail that fails to load is replaced by a placeholder: wait
  // for it to be decoded, or gone.
  await frame.waitForFunction((i) => !i.isConnected || (i.complete && i.naturalWidth > 0), { timeout }, img);
  const shown = await frame.$$eval("pierce/img.thumbnail", (els) =>
    els.map((i) => ({ src: i.src, width: i.naturalWidth, height: i.naturalHeight })),
  );
  process.stdout.write(JSON.stringify({ thumbnails: shown, console: log }) + "\n");
} finally {
  await browser.close();
}
