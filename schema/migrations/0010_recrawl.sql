-- Recurring campaigns (issue 15): what the runs of a series saw of each
-- URL, so that the next run fetches it conditionally, revisits it when
-- due, and follows the links of its last version when it has not changed.
-- A campaign is one run; its spec's recrawl.series names the series.
CREATE TABLE IF NOT EXISTS url_history (
    series        text        NOT NULL,
    fingerprint   bigint      NOT NULL, -- as frontier.fingerprint
    url           text        NOT NULL,
    etag          text,                 -- validators of the last version
    last_modified text,
    digest        text,                 -- its content digest
    links         text[]      NOT NULL DEFAULT '{}', -- the URLs it linked to
    first_seen    timestamptz NOT NULL DEFAULT now(),
    last_fetched  timestamptz,
    last_changed  timestamptz,
    changes       int         NOT NULL DEFAULT 0, -- versions seen after the first
    interval_s    bigint      NOT NULL DEFAULT 0, -- revisit interval: due at last_fetched + it
    last_status   int,
    gone_at       timestamptz,          -- when it first answered 404 or 410; NULL while it answers
    sitemap_lastmod timestamptz,        -- the latest <lastmod> a sitemap gave it: due if after last_fetched
    PRIMARY KEY (series, fingerprint)
);
