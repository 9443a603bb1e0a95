package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// URLHistory is what earlier runs of a series saw of a URL (issue 15).
type URLHistory struct {
	ETag, LastModified, Digest string
	// Links are the URLs its last version linked to.
	Links       []string
	FirstSeen   time.Time
	LastFetched time.Time // zero if never fetched
	LastChanged time.Time
	Changes     int
	Interval    time.Duration
	Gone        bool
	// SitemapLastMod is the latest <lastmod> a sitemap gave the URL.
	SitemapLastMod time.Time
	// VersionRun is the campaign (run of the series) that fetched its
	// last version, whose items a run that finds it unchanged carries
	// (see Carry); 0 when none is known.
	VersionRun int64
}

// Due says whether a URL seen before is due for a revisit at now: it was
// gone (404, 410) when last asked, its interval has passed since it was
// last fetched, or a sitemap says it changed after that. A gone URL is
// never skipped as not due: that would follow the links of a version the
// site no longer has.
func (h *URLHistory) Due(now time.Time) bool {
	return h.Gone || h.LastFetched.IsZero() || !now.Before(h.LastFetched.Add(h.Interval)) || h.SitemapLastMod.After(h.LastFetched)
}

// History reads what a series saw of the URLs with these fingerprints;
// one never seen is left out.
func (s *Store) History(ctx context.Context, series string, fingerprints []int64) (map[int64]*URLHistory, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT fingerprint, coalesce(etag, ''), coalesce(last_modified, ''), coalesce(digest, ''), links,
		       first_seen, coalesce(last_fetched, 'epoch'), coalesce(last_changed, first_seen), changes, interval_s,
		       gone_at IS NOT NULL, coalesce(sitemap_lastmod, 'epoch'), coalesce(version_run, 0)
		FROM url_history WHERE series = $1 AND fingerprint = ANY($2)`, series, fingerprints)
	if err != nil {
		return nil, fmt.Errorf("history of series %s: %w", series, err)
	}
	defer rows.Close()
	out := make(map[int64]*URLHistory, len(fingerprints))
	for rows.Next() {
		var (
			fp       int64
			interval int64
			h        URLHistory
		)
		if err := rows.Scan(&fp, &h.ETag, &h.LastModified, &h.Digest, &h.Links, &h.FirstSeen,
			&h.LastFetched, &h.LastChanged, &h.Changes, &interval, &h.Gone, &h.SitemapLastMod, &h.VersionRun); err != nil {
			return nil, fmt.Errorf("history of series %s: %w", series, err)
		}
		if h.LastFetched.Equal(time.Unix(0, 0)) {
			h.LastFetched = time.Time{}
		}
		if h.SitemapLastMod.Equal(time.Unix(0, 0)) {
			h.SitemapLastMod = time.Time{}
		}
		h.Interval = time.Duration(interval) * time.Second
		out[fp] = &h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history of series %s: %w", series, err)
	}
	return out, nil
}

// SitemapLastMod is a <lastmod> a sitemap gave a URL.
type SitemapLastMod struct {
	Fingerprint int64
	URL         string
	LastMod     time.Time
}

// NoteSitemapLastMods records the <lastmod> sitemaps gave URLs of a
// series: a URL whose lastmod is after its last fetch is due at once,
// whatever its interval. A URL new to the series gets a history with only
// that (it is due: never fetched).
func (s *Store) NoteSitemapLastMods(ctx context.Context, series string, mods []SitemapLastMod) error {
	if len(mods) == 0 {
		return nil
	}
	fps, urls, ats := make([]int64, len(mods)), make([]string, len(mods)), make([]time.Time, len(mods))
	for i, m := range mods {
		fps[i], urls[i], ats[i] = m.Fingerprint, m.URL, m.LastMod
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO url_history AS h (series, fingerprint, url, sitemap_lastmod)
		SELECT $1, m.fp, m.url, max(m.at) FROM unnest($2::bigint[], $3::text[], $4::timestamptz[]) AS m(fp, url, at)
		GROUP BY m.fp, m.url
		ON CONFLICT (series, fingerprint) DO UPDATE SET
		    sitemap_lastmod = greatest(h.sitemap_lastmod, excluded.sitemap_lastmod)`,
		series, fps, urls, ats)
	if err != nil {
		return fmt.Errorf("note %d sitemap lastmods of series %s: %w", len(mods), series, err)
	}
	return nil
}

// Visit kinds: what a fetch of a URL of a series found.
const (
	VisitFetched     = "fetched"      // a version (200): its digest says whether it changed
	VisitNotModified = "not_modified" // 304 to the validators of the last version
	VisitGone        = "gone"         // 404 or 410
)

// Visit is one fetch of a URL of a series, to be added to its history.
type Visit struct {
	Fingerprint int64
	URL         string
	Kind        string
	Status      int
	// For VisitFetched: the version's validators, digest and links.
	ETag, LastModified, Digest string
	Links                      []string
	At                         time.Time
	// Run is the campaign that made the visit: a version it fetched is
	// the URL's VersionRun from then on.
	Run int64
}

// RecordVisits adds fetches to their URLs' histories. The history decides
// what changed, so a visit made without reading it first (Postgres was
// away) is recorded right: a version whose digest differs from the last
// is a change, counted, and the revisit interval adapts as Nutch's
// AdaptiveFetchSchedule does (x1.4 unchanged, x0.8 changed, within
// min..max; a URL new to the series keeps interval 0, due at every run
// until seen unchanged).
func (s *Store) RecordVisits(ctx context.Context, series string, min, max time.Duration, visits []Visit) error {
	if len(visits) == 0 {
		return nil
	}
	n := len(visits)
	var (
		fps                           = make([]int64, n)
		urls, kinds, etags, lms, digs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		statuses                      = make([]int32, n)
		ats                           = make([]time.Time, n)
		runs                          = make([]int64, n)
		links                         = make([]string, n) // each a JSON array: unnest cannot take ragged text[][]
	)
	for i, v := range visits {
		fps[i], urls[i], kinds[i], etags[i], lms[i], digs[i] = v.Fingerprint, v.URL, v.Kind, v.ETag, v.LastModified, v.Digest
		statuses[i], ats[i], runs[i] = int32(v.Status), v.At, v.Run
		links[i] = jsonStrings(v.Links)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO url_history AS h (series, fingerprint, url, etag, last_modified, digest, links,
		                              first_seen, last_fetched, last_changed, last_status, gone_at, version_run)
		SELECT $1, v.fp, v.url, nullif(v.etag, ''), nullif(v.lm, ''), nullif(v.dig, ''),
		       CASE WHEN v.kind = 'fetched' THEN ARRAY(SELECT jsonb_array_elements_text(v.links::jsonb)) ELSE '{}' END,
		       v.at, v.at, v.at, v.status, CASE WHEN v.kind = 'gone' THEN v.at END,
		       CASE WHEN v.kind = 'fetched' THEN nullif(v.run, 0) END
		FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[], $10::timestamptz[], $13::bigint[])
		     AS v(fp, url, kind, etag, lm, dig, links, status, at, run)
		ON CONFLICT (series, fingerprint) DO UPDATE SET
		    url = excluded.url,
		    last_fetched = excluded.last_fetched,
		    last_status = excluded.last_status,
		    gone_at = CASE WHEN excluded.gone_at IS NULL THEN NULL ELSE coalesce(h.gone_at, excluded.gone_at) END,
		    etag = CASE WHEN excluded.gone_at IS NULL AND excluded.digest IS NOT NULL THEN excluded.etag ELSE h.etag END,
		    last_modified = CASE WHEN excluded.gone_at IS NULL AND excluded.digest IS NOT NULL THEN excluded.last_modified ELSE h.last_modified END,
		    digest = coalesce(excluded.digest, h.digest),
		    links = CASE WHEN excluded.digest IS NOT NULL THEN excluded.links ELSE h.links END,
		    -- the run that fetched the version a 304 stands for stays; a
		    -- gone URL has no version
		    version_run = CASE WHEN excluded.digest IS NOT NULL THEN excluded.version_run
		                       WHEN excluded.gone_at IS NOT NULL THEN NULL ELSE h.version_run END,
		    changes = h.changes + (excluded.digest IS NOT NULL AND h.digest IS NOT NULL AND excluded.digest <> h.digest)::int,
		    last_changed = CASE WHEN excluded.digest IS NOT NULL AND excluded.digest IS DISTINCT FROM h.digest
		                        THEN excluded.last_fetched ELSE h.last_changed END,
		    interval_s = CASE
		        WHEN h.digest IS NULL THEN h.interval_s -- its first version (a sitemap named it before)
		        WHEN excluded.digest IS NOT NULL AND h.digest IS NOT NULL AND excluded.digest <> h.digest
		            THEN least($12::bigint, greatest($11::bigint, (h.interval_s * 0.8)::bigint))
		        WHEN excluded.gone_at IS NOT NULL THEN h.interval_s
		        ELSE least($12::bigint, (greatest(h.interval_s, $11::bigint) * 1.4)::bigint)
		    END`,
		series, fps, urls, kinds, etags, lms, digs, links, statuses, ats,
		int64(min/time.Second), int64(max/time.Second), runs)
	if err != nil {
		return fmt.Errorf("record %d visits of series %s: %w", n, series, err)
	}
	return nil
}

// jsonStrings is ss as a JSON array.
func jsonStrings(ss []string) string {
	if len(ss) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(ss) // strings always marshal
	return string(b)
}
