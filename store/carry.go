package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Carry is what a URL settled unchanged keeps of its last version, in a
// recurring campaign (campaign.Processor.Unchanged "last_version"): the
// items that Processors made of the version in the run that fetched it
// (URLHistory.VersionRun), copied into this run, each marked carried
// from that run. The processor is not called and no body is kept: the
// version's items are what it would return again. They are copied only
// while the version is the one the series knows (Digest): a stale
// pointer carries nothing rather than the items of an older version.
type Carry struct {
	From       int64
	Digest     string
	Processors []string
}

// carryRows are the carries of a commit's outcomes, a row per URL and
// processor.
type carryRows struct {
	ids, from []int64
	digest    []string
	processor []string
}

func (c *carryRows) add(id int64, carry *Carry) {
	for _, p := range carry.Processors {
		c.ids = append(c.ids, id)
		c.from = append(c.from, carry.From)
		c.digest = append(c.digest, carry.Digest)
		c.processor = append(c.processor, p)
	}
}

func (c *carryRows) empty() bool { return len(c.ids) == 0 }

// commit copies the carried items of the URLs the commit recorded
// (accepted), in its transaction: a URL settled unchanged has its items
// exactly when its outcome is recorded. The source page is found by
// fingerprint in the run that fetched the version (frontier's (campaign,
// fingerprint) index), and its items by the items' key.
func (c *carryRows) commit(ctx context.Context, tx pgx.Tx, campaignKey any, accepted map[int64]bool) error {
	if c.empty() {
		return nil
	}
	var ids, from []int64
	var digest, processor []string
	for i, id := range c.ids {
		if accepted[id] {
			ids, from = append(ids, id), append(from, c.from[i])
			digest, processor = append(digest, c.digest[i]), append(processor, c.processor[i])
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO items (campaign, processor, url_id, seq, item, carried_from)
		SELECT $1, c.processor, c.id, i.seq, i.item, c.src
		FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[]) AS c(id, src, digest, processor)
		JOIN frontier f ON f.id = c.id AND f.campaign = $1
		JOIN frontier v ON v.campaign = c.src AND v.fingerprint = f.fingerprint
		JOIN pages vp ON vp.url_id = v.id AND coalesce(vp.content_digest, 'empty') = c.digest
		JOIN items i ON i.campaign = c.src AND i.processor = c.processor AND i.url_id = v.id
		ON CONFLICT DO NOTHING`, campaignKey, ids, from, digest, processor)
	if err != nil {
		return fmt.Errorf("carry the items of %d unchanged pages: %w", len(ids), err)
	}
	return nil
}
