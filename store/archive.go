package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/archive"
)

// ClaimPayloads is the cluster's archive.Index: it records each payload the
// campaign has not archived yet and returns, for each claim, the record
// holding its payload — the claim itself when it is the first, else the
// record archived before (by any node). Of two claims of one payload in
// one call, the first is the original.
func (s *Store) ClaimPayloads(ctx context.Context, campaignKey int64, claims []archive.Payload) ([]archive.Payload, error) {
	held := make(map[string]archive.Payload, len(claims))
	var want []archive.Payload // one claim per digest, in order
	for _, c := range claims {
		if _, ok := held[c.Digest]; !ok {
			held[c.Digest] = archive.Payload{}
			want = append(want, c)
		}
	}
	// A row found taken by the insert can be gone by the read (its record
	// failed to be written, and was released): claim again.
	for attempt := 0; len(want) > 0; attempt++ {
		if attempt == 3 {
			return nil, fmt.Errorf("claim payloads of campaign %d: claims keep vanishing", campaignKey)
		}
		won, err := s.insertPayloads(ctx, campaignKey, want)
		if err != nil {
			return nil, err
		}
		var taken []string
		for _, c := range want {
			if won[c.Digest] {
				held[c.Digest] = c
			} else {
				taken = append(taken, c.Digest)
			}
		}
		if len(taken) == 0 {
			break
		}
		if err := s.readPayloads(ctx, campaignKey, taken, held); err != nil {
			return nil, err
		}
		want = slices.DeleteFunc(want, func(c archive.Payload) bool { return held[c.Digest].RecordID != "" })
	}
	out := make([]archive.Payload, len(claims))
	for i, c := range claims {
		out[i] = held[c.Digest]
	}
	return out, nil
}

// insertPayloads records the claims whose payloads the campaign has not
// archived yet, and says which digests it recorded.
func (s *Store) insertPayloads(ctx context.Context, campaignKey int64, claims []archive.Payload) (map[string]bool, error) {
	digests, ids, uris, dates := make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		digests[i], ids[i], uris[i], dates[i] = c.Digest, c.RecordID, c.URI, c.Date
	}
	var won map[string]bool
	err := s.retry(ctx, func() error {
		won = map[string]bool{}
		rows, err := s.pool.Query(ctx, `
			INSERT INTO archived_payloads (campaign, digest, record_id, target_uri, warc_date)
			SELECT $1, d, r, u, w FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(d, r, u, w)
			ON CONFLICT (campaign, digest) DO NOTHING
			RETURNING digest`, campaignKey, digests, ids, uris, dates)
		if err != nil {
			return err
		}
		var d string
		_, err = pgx.ForEachRow(rows, []any{&d}, func() error { won[d] = true; return nil })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim payloads of campaign %d: %w", campaignKey, err)
	}
	return won, nil
}

// readPayloads reads into held the records archived with the payloads of
// digests.
func (s *Store) readPayloads(ctx context.Context, campaignKey int64, digests []string, held map[string]archive.Payload) error {
	rows, err := s.pool.Query(ctx, `
		SELECT digest, record_id, target_uri, warc_date FROM archived_payloads
		WHERE campaign = $1 AND digest = ANY($2)`, campaignKey, digests)
	if err != nil {
		return fmt.Errorf("read payloads of campaign %d: %w", campaignKey, err)
	}
	var p archive.Payload
	if _, err := pgx.ForEachRow(rows, []any{&p.Digest, &p.RecordID, &p.URI, &p.Date}, func() error { held[p.Digest] = p; return nil }); err != nil {
		return fmt.Errorf("read payloads of campaign %d: %w", campaignKey, err)
	}
	return nil
}

// ReleasePayloads forgets claims whose records were never written, so the
// payload's next copy is archived in full.
func (s *Store) ReleasePayloads(ctx context.Context, campaignKey int64, claims []archive.Payload) error {
	digests, ids := make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		digests[i], ids[i] = c.Digest, c.RecordID
	}
	_, err := s.pool.Exec(ctx, `
		DELETE FROM archived_payloads p USING unnest($2::text[], $3::text[]) AS t(d, r)
		WHERE p.campaign = $1 AND p.digest = t.d AND p.record_id = t.r`, campaignKey, digests, ids)
	if err != nil {
		return fmt.Errorf("release payloads of campaign %d: %w", campaignKey, err)
	}
	return nil
}

// CampaignID is the ID of the campaign with this key: it names the
// campaign's WARC directory.
func (s *Store) CampaignID(ctx context.Context, key int64) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT id FROM campaigns WHERE key = $1`, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("campaign %d: %w", key, ErrNoCampaign)
	}
	if err != nil {
		return "", fmt.Errorf("load ID of campaign %d: %w", key, err)
	}
	return id, nil
}
