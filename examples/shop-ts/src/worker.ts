// The shop example's processor in TypeScript: a Temporal activity worker
// (no workflows, so no bundling) that spiderpool campaigns send pages to.
// It returns, for each product page, the same item as examples/shop-go.
//
//   npm ci && npm run build && npm start
//
// Environment: TEMPORAL_ADDRESS (default localhost:7233),
// TEMPORAL_NAMESPACE (default), PROCESSOR_QUEUE (default
// spiderpool.processor.products), and the node secret the nodes serve
// bodies behind: SPIDERPOOL_NODE_SECRET, or the file
// SPIDERPOOL_NODE_SECRET_FILE names.
import { NativeConnection, Worker } from '@temporalio/worker';
import * as cheerio from 'cheerio';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

// What spiderpool sends: campaign.ProcessRequest in Go. A body up to the
// processor's inline limit comes base64-encoded in `body`; a larger one
// by reference, from any of `body_ref.urls`.
interface ProcessPage {
  key: string;
  url: string;
  final_url: string;
  depth: number;
  status: number;
  headers: Record<string, string[]>;
  content_type: string;
  fetched_at: string;
  body?: string;
  body_ref?: { urls: string[]; sha256: string };
  body_length: number;
  // Set when a browser rendered the page (the campaign's "render"): the
  // body is then the rendered DOM, or the document as served for a
  // processor whose spec says "document": "original".
  rendered?: boolean;
}

interface ProcessRequest {
  campaign: string;
  processor: string;
  pages: ProcessPage[];
}

// What spiderpool takes back: items (JSON objects) and links per page.
interface PageResult {
  key: string;
  items?: object[];
  links?: string[];
  error?: string;
}

// The node secret, presented as a bearer token: nodes answer 401 without it.
function nodeSecret(): string {
  const file = process.env.SPIDERPOOL_NODE_SECRET_FILE;
  if (file) return readFileSync(file, 'utf8').split('\n')[0].trim();
  return process.env.SPIDERPOOL_NODE_SECRET ?? '';
}
const authorization: Record<string, string> = nodeSecret() ? { Authorization: `Bearer ${nodeSecret()}` } : {};

async function bodyOf(p: ProcessPage): Promise<string> {
  if (p.body !== undefined) return Buffer.from(p.body, 'base64').toString('utf8');
  if (!p.body_ref) return '';
  for (const url of p.body_ref.urls) {
    const resp = await fetch(url, { headers: authorization });
    if (resp.status === 401) throw new Error(`body of ${p.url}: ${url} wants the node secret (SPIDERPOOL_NODE_SECRET)`);
    if (!resp.ok) continue;
    const bytes = Buffer.from(await resp.arrayBuffer());
    if (createHash('sha256').update(bytes).digest('hex') === p.body_ref.sha256) return bytes.toString('utf8');
  }
  throw new Error(`body of ${p.url}: no node served it`);
}

// products is the activity: one item per div.product.
export async function products(req: ProcessRequest): Promise<{ pages: PageResult[] }> {
  const pages: PageResult[] = [];
  for (const p of req.pages) {
    const $ = cheerio.load(await bodyOf(p));
    const items = $('div.product')
      .map((_, el) => ({
        sku: $(el).attr('data-sku') ?? '',
        name: $(el).find('.name').text().trim(),
        price: $(el).find('.price').text().trim(),
      }))
      .get();
    pages.push({ key: p.key, items });
  }
  return { pages };
}

async function main(): Promise<void> {
  const connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS ?? 'localhost:7233' });
  const worker = await Worker.create({
    connection,
    namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue: process.env.PROCESSOR_QUEUE ?? 'spiderpool.processor.products',
    activities: { products },
  });
  await worker.run();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
