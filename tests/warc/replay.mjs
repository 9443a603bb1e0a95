// replay.mjs opens an archived page in ReplayWeb.page (npm "replaywebpage",
// its prebuilt ui.js and sw.js, which bundle @webrecorder/wabac) in
// headless Chromium, driven by puppeteer-core, and prints as JSON what the
// replayed page shows: its title, each image's natural size, computed
// styles, and the resources the page loaded with their statuses.
//
//   node replay.mjs CHROMIUM EMBED_PAGE_URL ARCHIVED_URL TIMEOUT_MS [SELECTOR]
//
// With SELECTOR, the replayed page is a script's: it waits until an
// element matching SELECTOR is there, scrolls to the bottom (lazy images
// load when scrolled to), and reports that element's text too.
import puppeteer from "puppeteer-core";

const [chromium, embed, archived, timeoutArg, selector] = process.argv.slice(2);
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
  page.on("pageerror", (e) => log.push("page error: " + e.message));
  page.on("response", (r) => r.status() >= 400 && log.push(`${r.status()} ${r.url()}`));
  await page.goto(embed, { waitUntil: "load", timeout });
  // The replay's frame is /replay/w/<collection>/<timestamp>mp_/<url>.
  const frame = await page
    .waitForFrame((f) => f.url().includes("mp_/" + archived), { timeout })
    .catch((e) => {
      const frames = page.frames().map((f) => f.url());
      throw new Error(`${e.message}; frames ${JSON.stringify(frames)}; console ${JSON.stringify(log)}`);
    });
  if (selector) {
    await frame.waitForSelector(selector, { timeout });
    await frame.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
    await frame.waitForFunction(() => [...document.images].every((i) => i.getAttribute("src")), { timeout });
  }
  await frame.waitForFunction(
    () => document.readyState === "complete" && [...document.images].every((i) => i.complete),
    { timeout },
  );
  const shown = await frame.evaluate(async () => {
    // Background images load when styles apply, after the load event:
    // load each one the page's styles name, as the page would, and
    // measure it.
    const urls = new Set();
    for (const el of document.querySelectorAll("*")) {
      for (const m of getComputedStyle(el).backgroundImage.matchAll(/url\("([^"]+)"\)/g)) urls.add(m[1]);
    }
    const backgrounds = await Promise.all(
      [...urls].map(
        (url) =>
          new Promise((resolve) => {
            const img = new Image();
            img.onload = () => resolve({ url, width: img.naturalWidth, height: img.naturalHeight });
            img.onerror = () => resolve({ url, width: 0, height: 0 });
            img.src = url;
          }),
      ),
    );
    const styleOf = (sel, prop) => {
      const el = document.querySelector(sel);
      return el ? getComputedStyle(el)[prop] : null;
    };
    return {
      frame: location.href,
      title: document.title,
      images: [...document.images].map((i) => ({ id: i.id, src: i.currentSrc || i.src, width: i.naturalWidth, height: i.naturalHeight })),
      h1Color: styleOf("h1", "color"),
      bgImage: styleOf("#bg", "backgroundImage"),
      backgrounds,
      resources: performance.getEntriesByType("resource").map((e) => ({ name: e.name, status: e.responseStatus })),
    };
  });
  if (selector) shown.text = await frame.$eval(selector, (e) => e.textContent);
  shown.console = log;
  process.stdout.write(JSON.stringify(shown) + "\n");
} finally {
  await browser.close();
}
