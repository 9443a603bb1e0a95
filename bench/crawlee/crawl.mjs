// One crawl with Crawlee's PuppeteerCrawler, as `bench render` runs it
// against a spiderpool browser node on the same site: every page rendered
// in Chromium (puppeteer-core driving Debian's /usr/bin/chromium), waited
// for until the network is idle (no connection for 500ms), scrolled with
// Crawlee's infiniteScroll, and its links on the same host enqueued.
//
//   node crawl.mjs --seed URL [--tabs 2] [--chromium /usr/bin/chromium] [--scroll-idle-secs 1]
//
// Prints one JSON line: {"pages": rendered, "failed": n, "seconds": wall
// time from run() to its end, "started_at_ms": when run() was called (Unix
// ms), "settings": {...}}. Storage goes to
// CRAWLEE_STORAGE_DIR (the bench gives it a temporary directory).
import { parseArgs } from 'node:util';
import { PuppeteerCrawler, puppeteerUtils, log } from 'crawlee';
import puppeteer from 'puppeteer-core';

const { values: opt } = parseArgs({
    options: {
        seed: { type: 'string' },
        tabs: { type: 'string', default: '2' },
        chromium: { type: 'string', default: '/usr/bin/chromium' },
        'scroll-idle-secs': { type: 'string', default: '1' },
    },
});
if (!opt.seed) {
    console.error('crawl.mjs: --seed is required');
    process.exit(2);
}
const tabs = Number(opt.tabs);
const scrollIdle = Number(opt['scroll-idle-secs']);
log.setLevel(log.LEVELS.WARNING);

// CRAWL_TRACE=1 prints each page's time in the handler to stderr.
const trace = process.env.CRAWL_TRACE
    ? (url, began) => console.error(`${((performance.now() - start) / 1000).toFixed(2)}s ${url} handler ${((performance.now() - began) / 1000).toFixed(2)}s`)
    : () => {};
let start = 0;
let pages = 0;
let failed = 0;
const crawler = new PuppeteerCrawler({
    // A fixed number of pages at once, as a node's --browser-tabs: the
    // autoscaled pool would otherwise start at one and grow by the
    // machine's load.
    minConcurrency: tabs,
    maxConcurrency: tabs,
    // The viewport of a spiderpool tab (its window is 1280x900, headless
    // Chromium keeps 87px of it for the browser's frame), without
    // Crawlee's fingerprints, which would pick a screen per page: the
    // app's feed loads more only once scrolled, so a screen taller than
    // its first 20 items would never load the rest.
    browserPoolOptions: { useFingerprints: false },
    launchContext: {
        launcher: puppeteer,
        launchOptions: {
            executablePath: opt.chromium,
            headless: true,
            // Root in a container: Chromium's sandbox cannot start.
            args: ['--no-sandbox'],
            defaultViewport: { width: 1280, height: 813 },
        },
    },
    preNavigationHooks: [
        async (_ctx, gotoOptions) => {
            gotoOptions.waitUntil = 'networkidle0';
        },
    ],
    async requestHandler({ page, request, enqueueLinks }) {
        const began = performance.now();
        // Scrolls to the bottom until no XHR/fetch started for
        // waitForSecs (checked once a second, so 1 is the least).
        await puppeteerUtils.infiniteScroll(page, { waitForSecs: scrollIdle });
        await enqueueLinks(); // same hostname, Crawlee's default
        pages++;
        trace(request.url, began);
    },
    failedRequestHandler({ request }, error) {
        failed++;
        console.error(`crawl.mjs: ${request.url} failed: ${error.message}`);
    },
});

const startedAt = Date.now();
start = performance.now();
await crawler.run([opt.seed]);
const seconds = (performance.now() - start) / 1000;
console.log(JSON.stringify({
    pages,
    failed,
    seconds,
    started_at_ms: startedAt,
    settings: {
        maxConcurrency: tabs,
        waitUntil: 'networkidle0',
        infiniteScroll: { waitForSecs: scrollIdle },
        enqueueLinks: 'same-hostname',
    },
}));
