package store

import (
	"context"
	"fmt"
)

// What a frontier URL is fetched as (frontier.kind).
const (
	// KindPage is a page: fetched, its links followed.
	KindPage = "page"
	// KindRequisite is a page requisite (scope.requisites): an image,
	// stylesheet, script or font a page needs to render, fetched under the
	// same scope, robots.txt and politeness, its links not followed.
	KindRequisite = "requisite"
)

// kind is the kind column: a page unless said otherwise.
func (u *NewURL) kind() string {
	if u.Kind == "" {
		return KindPage
	}
	return u.Kind
}

// KindCount is how many of a campaign's URLs of one kind ended each way.
type KindCount struct {
	Kind                               string
	Fetched, Failed, Excluded, Pending int64
}

// CountKinds counts a campaign's URLs by kind and state: requisites
// counted apart from pages.
func (s *Store) CountKinds(ctx context.Context, campaignKey int64) (map[string]KindCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT kind,
		       count(*) FILTER (WHERE state = 'fetched'), count(*) FILTER (WHERE state = 'failed'),
		       count(*) FILTER (WHERE state = 'excluded'), count(*) FILTER (WHERE state IN ('pending', 'leased'))
		FROM frontier WHERE campaign = $1 GROUP BY kind`, campaignKey)
	if err != nil {
		return nil, fmt.Errorf("count kinds of campaign %d: %w", campaignKey, err)
	}
	defer rows.Close()
	out := map[string]KindCount{}
	for rows.Next() {
		var k KindCount
		if err := rows.Scan(&k.Kind, &k.Fetched, &k.Failed, &k.Excluded, &k.Pending); err != nil {
			return nil, fmt.Errorf("count kinds of campaign %d: %w", campaignKey, err)
		}
		out[k.Kind] = k
	}
	return out, rows.Err()
}
