package store

import (
	"context"
	"encoding/json"
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
	// Rendered: a browser rendered the page. Length and Digest are then
	// the document's as served (the archive's); RenderedLength and
	// RenderedDigest the DOM's, which Title and Links were read from.
	Rendered       bool   `json:"rendered,omitempty"`
	RenderedLength int64  `json:"rendered_length,omitempty"`
	RenderedDigest string `json:"rendered_digest,omitempty"`
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
		       coalesce(p.rendered, false), coalesce(p.rendered_length, 0), coalesce(p.rendered_digest, ''),
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
			&r.Rendered, &r.RenderedLength, &r.RenderedDigest,
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

// Item is one item as `campaign export --items` writes it.
type Item struct {
	Processor string          `json:"processor"`
	URL       string          `json:"url"`
	Item      json.RawMessage `json:"item"`
	// CarriedFrom, on an item of a page that did not change in this run
	// of a recurring campaign (see Carry), is the ID of the run that
	// fetched the version the processor made it of.
	CarriedFrom string `json:"carried_from,omitempty"`
}

// ExportItems streams a campaign's items (one processor's, when named),
// by processor, page and order within the page.
func (s *Store) ExportItems(ctx context.Context, campaignKey int64, processor string, fn func(Item) error) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.processor, f.url, i.item::text, coalesce(c.id, '')
		FROM items i JOIN frontier f ON f.id = i.url_id
		LEFT JOIN campaigns c ON c.key = i.carried_from
		WHERE i.campaign = $1 AND ($2 = '' OR i.processor = $2)
		ORDER BY i.processor, i.url_id, i.seq`, campaignKey, processor)
	if err != nil {
		return 0, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var it Item
		var raw string
		if err := rows.Scan(&it.Processor, &it.URL, &raw, &it.CarriedFrom); err != nil {
			return n, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
		}
		it.Item = json.RawMessage(raw)
		if err := fn(it); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
	}
	return n, nil
}
