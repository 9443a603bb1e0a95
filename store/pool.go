package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// A pool run's batches live in node_batches (migration 0021): a lease
// routes them there (routeBatches), nodes take them (TakeBatches) and
// report them done (FinishBatches), and the workflow reads the figures
// (CampaignProgress). A node's rows are its window for the campaign.

// expireNodeBatches drops the campaign's batches nobody can still run:
// queued past their lease's expiry (their URLs return to pending with the
// lease, see expireLeases), and taken by a holder that stopped renewing
// (its node died; its claims return to pending there too).
func expireNodeBatches(ctx context.Context, tx pgx.Tx, key int64) error {
	_, err := tx.Exec(ctx, `
		DELETE FROM node_batches b
		WHERE b.campaign = $1
		  AND CASE WHEN b.taken_by IS NULL THEN b.expires_at < now()
		           ELSE NOT EXISTS (SELECT 1 FROM holders h WHERE h.holder = b.taken_by AND h.alive_until > now()) END`, key)
	if err != nil {
		return fmt.Errorf("expire node batches: %w", err)
	}
	return nil
}

// poolRooms keeps, of the ring's members, the nodes the registry calls
// alive and that take batches from Postgres, each with the batches its
// window has room for, and whether it has a browser (render hosts go only
// to those). A node that died since the workflow last read the registry
// is out of the ring at once: its hosts move at the next lease, not the
// next membership refresh.
func poolRooms(ctx context.Context, tx pgx.Tx, key int64, members []campaign.LeaseNode, window int) ([]campaign.LeaseNode, error) {
	ids := make([]string, len(members))
	weights := make([]float64, len(members))
	for i, m := range members {
		ids[i], weights[i] = m.ID, m.Weight
	}
	rows, err := tx.Query(ctx, `
		SELECT m.id, m.weight, $4::int - (SELECT count(*) FROM node_batches b WHERE b.campaign = $1 AND b.node = m.id)::int,
		       $6 = ANY (n.capabilities)
		FROM unnest($2::text[], $3::float8[]) WITH ORDINALITY AS m(id, weight, ord)
		JOIN nodes n ON n.id = m.id
		WHERE n.stopped_at IS NULL AND n.heartbeat_at + n.ttl > now()
		  AND n.capabilities_of = n.incarnation AND $5 = ANY (n.capabilities)
		ORDER BY m.ord`, key, ids, weights, window, campaign.CapPull, campaign.CapBrowser)
	if err != nil {
		return nil, fmt.Errorf("rooms of %d nodes: %w", len(members), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (campaign.LeaseNode, error) {
		var n campaign.LeaseNode
		err := r.Scan(&n.ID, &n.Weight, &n.Batches, &n.Browser)
		n.Batches = max(n.Batches, 0)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("rooms of %d nodes: %w", len(members), err)
	}
	return out, nil
}

// routeBatches writes a lease's batches into node_batches, and adds them
// to each node's figures, in two statements however many there are.
func routeBatches(ctx context.Context, tx pgx.Tx, key, leaseID int64, ttl time.Duration, a campaign.Assign, batches []campaign.NodeBatch) (campaign.Routed, error) {
	var (
		r       campaign.Routed
		nodes   []string
		offsets []int32
		lengths []int32
		ids     []int64
		perNode = map[string]*[2]int64{} // batches, URLs
	)
	for _, b := range batches {
		batch := b.IDs()
		nodes = append(nodes, b.Node)
		offsets = append(offsets, int32(len(ids)+1))
		lengths = append(lengths, int32(len(batch)))
		ids = append(ids, batch...)
		n, ok := perNode[b.Node]
		if !ok {
			n = &[2]int64{}
			perNode[b.Node] = n
		}
		n[0]++
		n[1] += int64(len(batch))
	}
	if len(nodes) == 0 {
		return r, nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO node_batches (campaign, campaign_id, lease_id, node, ids, hand_back_ms, body_chunks, expires_at)
		SELECT $1, $2, $3, b.node, ($6::bigint[])[b.off : b.off + b.len - 1], $7, $8, now() + $9::bigint * interval '1 millisecond'
		FROM unnest($4::text[], $5::int[], $10::int[]) WITH ORDINALITY AS b(node, off, len, ord)
		ORDER BY b.ord`,
		key, a.CampaignID, leaseID, nodes, offsets, ids, a.HandBackAfter.D().Milliseconds(), a.BodyChunks,
		ttl.Milliseconds(), lengths); err != nil {
		return r, fmt.Errorf("route %d batches: %w", len(nodes), err)
	}
	ns := slices.Sorted(func(yield func(string) bool) {
		for n := range perNode {
			if !yield(n) {
				return
			}
		}
	})
	sent := make([]int64, len(ns))
	urls := make([]int64, len(ns))
	for i, n := range ns {
		sent[i], urls[i] = perNode[n][0], perNode[n][1]
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO campaign_nodes AS c (campaign, node, batches, urls)
		SELECT $1, n, b, u FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS t(n, b, u)
		ON CONFLICT (campaign, node) DO UPDATE SET batches = c.batches + EXCLUDED.batches, urls = c.urls + EXCLUDED.urls`,
		key, ns, sent, urls); err != nil {
		return r, fmt.Errorf("count routed batches: %w", err)
	}
	return campaign.Routed{Batches: len(nodes), URLs: len(ids), Nodes: len(ns)}, nil
}

// NodeHolder is one node identity of a process, with the holder token it
// claims under.
type NodeHolder struct {
	Node, Holder string
}

// TakeBatches takes up to limit batches queued for the given nodes, oldest
// first, marking each taken by its node's holder. Two processes never take
// the same batch (SKIP LOCKED), and a batch taken stays its node's until it
// is reported done or its holder dies.
func (s *Store) TakeBatches(ctx context.Context, nodes []NodeHolder, limit int) ([]campaign.FetchBatchRequest, error) {
	ids := make([]string, len(nodes))
	holders := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i], holders[i] = n.Node, n.Holder
	}
	rows, err := s.pool.Query(ctx, `
		WITH q AS (
			SELECT id FROM node_batches WHERE node = ANY($1) AND taken_by IS NULL
			ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED
		)
		UPDATE node_batches b SET taken_by = h.holder, taken_at = now()
		FROM q, unnest($1::text[], $2::text[]) AS h(node, holder)
		WHERE b.id = q.id AND h.node = b.node
		RETURNING b.id, b.campaign, b.campaign_id, b.lease_id, b.node, b.ids, b.hand_back_ms, b.body_chunks`,
		ids, holders, limit)
	if err != nil {
		return nil, fmt.Errorf("take batches: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (campaign.FetchBatchRequest, error) {
		var (
			b        campaign.FetchBatchRequest
			handBack int64
		)
		err := r.Scan(&b.Batch, &b.CampaignKey, &b.CampaignID, &b.LeaseID, &b.Node, &b.IDs, &handBack, &b.BodyChunks)
		b.HandBackAfter = campaign.Duration(time.Duration(handBack) * time.Millisecond)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("take batches: %w", err)
	}
	slices.SortFunc(out, func(a, b campaign.FetchBatchRequest) int { return cmp.Compare(a.Batch, b.Batch) })
	return out, nil
}

// DoneBatch is a taken batch that a node finished, with what it did.
type DoneBatch struct {
	Batch       int64
	CampaignKey int64
	Node        string
	Result      campaign.BatchResult
}

// FinishBatches drops finished batches from their nodes' windows and adds
// what they did to the nodes' figures, in one transaction however many
// there are.
func (s *Store) FinishBatches(ctx context.Context, done []DoneBatch) error {
	if len(done) == 0 {
		return nil
	}
	type key struct {
		campaign int64
		node     string
	}
	sums := map[key]*campaign.BatchResult{}
	batches := make([]int64, 0, len(done))
	for _, d := range done {
		batches = append(batches, d.Batch)
		k := key{d.CampaignKey, d.Node}
		if sums[k] == nil {
			sums[k] = &campaign.BatchResult{}
		}
		sums[k].Add(d.Result)
	}
	keys := slices.SortedFunc(func(yield func(key) bool) {
		for k := range sums {
			if !yield(k) {
				return
			}
		}
	}, func(a, b key) int { return cmp.Or(cmp.Compare(a.campaign, b.campaign), cmp.Compare(a.node, b.node)) })
	var c columns
	for _, k := range keys {
		r := sums[k]
		c.add(k.campaign, k.node, r.Fetched, r.Failed, r.Retried, r.Excluded, r.Discovered, r.Bytes,
			r.Requests, r.RequestMillis, r.TransportErrors)
	}
	return s.retryTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM node_batches WHERE id = ANY($1)`, batches); err != nil {
			return fmt.Errorf("finish %d batches: %w", len(batches), err)
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO campaign_nodes AS c (campaign, node, fetched, failed, retried, excluded, discovered, bytes,
				requests, request_ms, transport_errors)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
				$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[])
			ON CONFLICT (campaign, node) DO UPDATE SET
				fetched = c.fetched + EXCLUDED.fetched, failed = c.failed + EXCLUDED.failed,
				retried = c.retried + EXCLUDED.retried, excluded = c.excluded + EXCLUDED.excluded,
				discovered = c.discovered + EXCLUDED.discovered, bytes = c.bytes + EXCLUDED.bytes,
				requests = c.requests + EXCLUDED.requests, request_ms = c.request_ms + EXCLUDED.request_ms,
				transport_errors = c.transport_errors + EXCLUDED.transport_errors`, c.args()...)
		if err != nil {
			return fmt.Errorf("count %d finished batches: %w", len(batches), err)
		}
		return nil
	})
}

// columns builds the parallel arrays of an unnest() from rows of the same
// shape: the Nth value of each row goes to the Nth array.
type columns struct{ cols [][]any }

// add appends one row; every row has the same number and kinds of values.
func (c *columns) add(vals ...any) {
	if c.cols == nil {
		c.cols = make([][]any, len(vals))
	}
	for i, v := range vals {
		c.cols[i] = append(c.cols[i], v)
	}
}

// args are the arrays, each typed by its first value, as statement
// arguments.
func (c *columns) args() []any {
	out := make([]any, len(c.cols))
	for i, col := range c.cols {
		out[i] = typedColumn(col)
	}
	return out
}

func typedColumn(col []any) any {
	switch col[0].(type) {
	case int64:
		return typed[int64](col)
	case int:
		return typed[int](col)
	case string:
		return typed[string](col)
	}
	panic(fmt.Sprintf("columns: no array type for %T", col[0]))
}

func typed[T any](col []any) []T {
	out := make([]T, len(col))
	for i, v := range col {
		out[i] = v.(T)
	}
	return out
}

// ReleaseNodeBatches drops the campaign's batches routed to nodes (all
// nodes when nodes is nil; of one lease, when lease is set) and returns to pending their URLs that no live
// holder has claimed: the nodes left the ring (died, or were drained while
// the lease that routed to them ran), and their hosts' new owners fetch
// them. What a live holder claimed stays its own: it is fetching it.
func (s *Store) ReleaseNodeBatches(ctx context.Context, key int64, nodes []string, lease int64) (int, error) {
	var n int
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			WITH gone AS (
				DELETE FROM node_batches
				WHERE campaign = $1 AND ($2::text[] IS NULL OR node = ANY($2)) AND ($3 = 0 OR lease_id = $3)
				  AND ($3 = 0 OR taken_by IS NULL)
				RETURNING lease_id, ids
			), urls AS (
				SELECT lease_id, unnest(ids) AS id FROM gone
			)
			UPDATE frontier f SET state = 'pending', lease_id = NULL, lease_holder = NULL, lease_expires_at = NULL
			FROM urls
			WHERE f.id = urls.id AND f.campaign = $1 AND f.lease_id = urls.lease_id AND f.state = 'leased'
			  AND (f.lease_holder IS NULL OR NOT `+liveHolder+`)`, key, nodes, lease)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release the batches of %d nodes in campaign %d: %w", len(nodes), key, err)
	}
	return n, nil
}

// ReleaseQueuedBatches drops the batches queued for nodes and not yet
// taken, in every campaign, and returns their URLs to pending: the nodes'
// process is stopping, and their hosts' next owners fetch them.
func (s *Store) ReleaseQueuedBatches(ctx context.Context, nodes []string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		WITH gone AS (
			DELETE FROM node_batches WHERE node = ANY($1) AND taken_by IS NULL RETURNING campaign, lease_id, ids
		), urls AS (
			SELECT campaign, lease_id, unnest(ids) AS id FROM gone
		)
		UPDATE frontier f SET state = 'pending', lease_id = NULL, lease_expires_at = NULL
		FROM urls
		WHERE f.id = urls.id AND f.campaign = urls.campaign AND f.lease_id = urls.lease_id
		  AND f.state = 'leased' AND f.lease_holder IS NULL`, nodes)
	if err != nil {
		return 0, fmt.Errorf("hand back the batches queued for %d nodes: %w", len(nodes), err)
	}
	return int(tag.RowsAffected()), nil
}

// CampaignProgress reads a pool run's figures: the totals, and the
// figures of nodes that changed since req.Known (req.First first, then in
// turn after req.After), at most req.Limit of them.
func (s *Store) CampaignProgress(ctx context.Context, req campaign.ProgressRequest) (campaign.Progress, error) {
	var p campaign.Progress
	var figures []campaign.NodeFigures
	rows, err := s.pool.Query(ctx, `
		SELECT coalesce(c.node, b.node), coalesce(c.batches, 0), coalesce(b.n, 0)::int, coalesce(b.urls, 0)::int,
		       coalesce(c.fetched, 0), coalesce(c.failed, 0), coalesce(c.retried, 0), coalesce(c.excluded, 0),
		       coalesce(c.discovered, 0), coalesce(c.bytes, 0), coalesce(c.requests, 0), coalesce(c.request_ms, 0),
		       coalesce(c.transport_errors, 0)
		FROM (SELECT * FROM campaign_nodes WHERE campaign = $1) c
		FULL JOIN (SELECT node, count(*) AS n, sum(cardinality(ids)) AS urls FROM node_batches WHERE campaign = $1 GROUP BY node) b
		  ON b.node = c.node
		ORDER BY 1`, req.CampaignKey)
	if err != nil {
		return p, fmt.Errorf("progress of campaign %d: %w", req.CampaignKey, err)
	}
	for rows.Next() {
		var (
			n                         campaign.NodeFigures
			retried, excluded, discov int64
			bytes                     int64
		)
		if err := rows.Scan(&n.ID, &n.BatchesSent, &n.InflightBatches, &n.InflightURLs, &n.Fetched, &n.Failed,
			&retried, &excluded, &discov, &bytes, &n.Requests, &n.RequestMillis, &n.TransportErrors); err != nil {
			rows.Close()
			return p, fmt.Errorf("progress of campaign %d: %w", req.CampaignKey, err)
		}
		t := &p.Totals
		t.Fetched += int(n.Fetched)
		t.Failed += int(n.Failed)
		t.Retried += int(retried)
		t.Excluded += int(excluded)
		t.Discovered += int(discov)
		t.Bytes += bytes
		t.Requests += int(n.Requests)
		t.RequestMillis += n.RequestMillis
		t.TransportErrors += int(n.TransportErrors)
		figures = append(figures, n)
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("progress of campaign %d: %w", req.CampaignKey, err)
	}
	p.Nodes, p.After = campaign.ChangedFigures(figures, req)
	return p, nil
}

// StoppedCampaigns returns those of keys whose campaign is no longer
// running (completed, cancelled, failed): their nodes stop fetching for
// them and hand back what they hold.
func (s *Store) StoppedCampaigns(ctx context.Context, keys []int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT key FROM campaigns WHERE key = ANY($1) AND status <> 'running'`, keys)
	if err != nil {
		return nil, fmt.Errorf("campaigns stopped: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// RenderWaitingCap is as far as RenderWaiting counts.
const RenderWaitingCap = 10_000

// RenderWaiting counts the campaign's pending URLs on render hosts (those
// of render, matched as campaign.Render.RendersHost does) while no live
// node that pulls, among only when set (the campaign's spec.nodes), has a
// browser: the URLs that wait for one. 0 when render is nil or such a
// node is up; counted up to RenderWaitingCap.
func (s *Store) RenderWaiting(ctx context.Context, key int64, render *campaign.Render, only []string) (int64, error) {
	if render == nil || len(render.Hosts) == 0 {
		return 0, nil
	}
	var n int64
	err := s.pool.QueryRow(ctx, `
		SELECT CASE WHEN EXISTS (
			SELECT FROM nodes n
			WHERE `+alive+` AND n.capabilities_of = n.incarnation
			  AND $3 = ANY (n.capabilities) AND $4 = ANY (n.capabilities)
			  AND (coalesce(cardinality($5::text[]), 0) = 0 OR n.id = ANY ($5)))
		THEN 0 ELSE (
			SELECT count(*) FROM (
				SELECT FROM hosts h JOIN frontier f ON f.campaign = h.campaign AND f.host_id = h.id AND f.state = 'pending'
				WHERE h.campaign = $1 AND ('*' = ANY ($2) OR lower(h.shard_key) = ANY ($2))
				LIMIT $6) p)
		END`, key, render.Hosts, campaign.CapPull, campaign.CapBrowser, only, RenderWaitingCap).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("render URLs waiting in campaign %d: %w", key, err)
	}
	return n, nil
}
