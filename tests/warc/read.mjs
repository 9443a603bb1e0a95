// read.mjs reads WARC files with webrecorder's warcio.js, an independent
// reader, and prints one JSON object a record: its WARC headers, its block
// as stored (base64), whether the block and payload digests it declares
// match the bytes, and, for HTTP records, what warcio makes of the HTTP
// message: status, headers and the content decoded (dechunked, gunzipped).
//
//   node read.mjs FILE.warc.gz...
import { createReadStream } from "node:fs";
import { createHash } from "node:crypto";
import { WARCParser } from "warcio";

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

function base32(buf) {
  let bits = 0, value = 0, out = "";
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  while (out.length % 8) out += "=";
  return out;
}

// digestOf computes a digest in the algorithm and encoding a WARC header
// value names ("sha1:BASE32", "sha256:hex").
function digestOf(declared, bytes) {
  const [algo, value] = declared.split(/:(.*)/s);
  const sum = createHash(algo.toLowerCase().replace("-", "")).update(bytes).digest();
  const hex = sum.toString("hex");
  return value.toLowerCase() === hex ? declared : algo + ":" + (/^[0-9a-f]+$/i.test(value) ? hex : base32(sum));
}

function headerEnd(block) {
  const i = block.indexOf("\r\n\r\n");
  return i < 0 ? -1 : i + 4;
}

for (const file of process.argv.slice(2)) {
  // Pass 1: blocks as stored, HTTP not parsed.
  const raw = [];
  const p1 = new WARCParser(createReadStream(file), { keepHeadersCase: true, parseHttp: false });
  for await (const record of p1) {
    const block = Buffer.from(await record.readFully(false));
    const headers = {};
    for (const [k, v] of record.warcHeaders.headers) headers[k] = v;
    const out = { file, offset: p1.offset, type: record.warcType, headers, block: block.toString("base64") };
    const bd = record.warcBlockDigest;
    out.block_digest_ok = bd ? digestOf(bd, block) === bd : null;
    const pd = record.warcPayloadDigest;
    const isHTTP = (record.warcContentType || "").startsWith("application/http");
    if (pd && isHTTP && record.warcType !== "revisit") {
      const end = headerEnd(block);
      out.payload_digest_ok = end >= 0 && digestOf(pd, block.subarray(end)) === pd;
    }
    raw.push(out);
  }
  // Pass 2: warcio's own reading of the HTTP messages.
  let i = 0;
  for await (const record of WARCParser.iterRecords(createReadStream(file), { keepHeadersCase: true })) {
    const out = raw[i++];
    if (record.httpHeaders) {
      out.http_status = record.httpHeaders.statusCode || 0;
      out.http_headers = {};
      for (const [k, v] of record.httpHeaders.headers) out.http_headers[k] = v;
      if (record.warcType === "response") {
        out.content = Buffer.from(await record.readFully(true)).toString("base64");
      }
    }
  }
  if (i !== raw.length) throw new Error(`${file}: ${raw.length} records raw, ${i} parsed`);
  for (const out of raw) process.stdout.write(JSON.stringify(out) + "\n");
}
