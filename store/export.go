package store

import (
	"context"
	"fmt"
	"time"
)

// PageRecord is one URL of a campaign as `campaign export` writes it: the
// frontier row and, once fetched, its page.
type PageRecord struct {
	URL         string     `json:"url"`
	FoundAs     string     `json:"found_as,omitempty"`
	State       string     `json:"state"`
	Depth       int        `json:"depth"`
	Attempts    int        `json:"attempts"`
	Error       string     `json:"error,omitempty"`
	Status      int        `json:"status,omitempty"`
	ContentType string     `json:"content_type,omitempty"`
	Length      int64      `json:"content_length,omitempty"`
	Digest      string     `json:"content_digest,omitempty"`
	Title       string     `json:"title,omitempty"`
	RedirectTo  string     `json:"redirect_to,omitempty"`
	Links       int        `json:"links,omitempty"`
	FetchedAt   *time.Time `json:"fetched_at,omitempty"`
	DurationMs  int        `json:"duration_ms,omitempty"`
	Node        string     `json:"node,omitempty"`
	NoIndex     bool       `json:"noindex,omitempty"`
	NoFollow    bool       `json:"nofollow,omitempty"`
	NoArchive   bool       `json:"noarchive,omitempty"`
	Canonical   string     `json:"canonical,omitempty"`
	Charset     string     `json:"charset,omitempty"`
	// A page of a recurring campaign (spec.recrawl) also carries what the
	// runs of its series saw of it: status 304 is "not modified".
	FirstSeen   *time.Time `json:"first_seen,omitempty"`
	LastChanged *time.Time `json:"last_changed,omitempty"`
	LastFetched *time.Time `json:"last_fetched,omitempty"`
	Changes     *int       `json:"changes,omitempty"`
	Gone        bool       `json:"gone,omitempty"`
}

// ExportPages calls fn for each fetched page of the campaign, or with all
// for every URL in its frontier whatever its state, in discovery order. It
// streams: memory stays flat however large the campaign.
func (s *Store) ExportPages(ctx context.Context, campaignKey int64, all bool, fn func(PageRecord) error) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT f.url, coalesce(f.found_as, ''), f.state::text, f.depth, f.attempts, coalesce(f.last_error, ''),
		       coalesce(p.status, f.last_status, 0), coalesce(p.content_type, ''), coalesce(p.content_length, 0),
		       coalesce(p.content_digest, ''), coalesce(p.title, ''), coalesce(p.redirect_to, ''), coalesce(p.links, 0),
		       p.fetched_at, coalesce(p.duration_ms, 0), coalesce(p.node, f.node, ''),
		       coalesce(p.noindex, false), coalesce(p.nofollow, false), coalesce(p.noarchive, false),
		       coalesce(p.canonical, ''), coalesce(p.charset, ''),
		       h.first_seen, h.last_changed, h.last_fetched, h.changes, coalesce(h.gone_at IS NOT NULL, false)
		FROM frontier f LEFT JOIN pages p ON p.url_id = f.id
		LEFT JOIN url_history h ON h.series = (SELECT spec->'recrawl'->>'series' FROM campaigns WHERE key = $1)
		                       AND h.fingerprint = f.fingerprint
		WHERE f.campaign = $1 AND ($2 OR f.state = 'fetched')
		ORDER BY f.id`, campaignKey, all)
	if err != nil {
		return 0, fmt.Errorf("export pages of campaign %d: %w", campaignKey, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var r PageRecord
		if err := rows.Scan(&r.URL, &r.FoundAs, &r.State, &r.Depth, &r.Attempts, &r.Error,
			&r.Status, &r.ContentType, &r.Length, &r.Digest, &r.Title, &r.RedirectTo, &r.Links,
			&r.FetchedAt, &r.DurationMs, &r.Node,
			&r.NoIndex, &r.NoFollow, &r.NoArchive, &r.Canonical, &r.Charset,
			&r.FirstSeen, &r.LastChanged, &r.LastFetched, &r.Changes, &r.Gone); err != nil {
			return n, fmt.Errorf("export pages of campaign %d: %w", campaignKey, err)
		}
		if err := fn(r); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("export pages of campaign %d: %w", campaignKey, err)
	}
	return n, nil
}
