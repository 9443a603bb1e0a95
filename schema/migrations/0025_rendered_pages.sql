-- Rendered pages in the page record (issue 33): a page a browser rendered
-- (spec.render) says so, with its DOM's length and digest beside the
-- document as served. content_length and content_digest stay the
-- document's as served, which is what the archive (WARC) holds; title,
-- links and canonical are read from the DOM. Defaults keep the inserts of
-- nodes not yet upgraded working (their pages read as not rendered); the
-- columns are added without rewriting the table.
ALTER TABLE pages
    ADD COLUMN IF NOT EXISTS rendered        boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS rendered_length bigint, -- bytes of the rendered DOM (UTF-8)
    ADD COLUMN IF NOT EXISTS rendered_digest text;   -- sha256:<hex> of the rendered DOM
