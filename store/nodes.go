package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// alive is the registry's test of a live node row: not stopped, and its
// heartbeat younger than its TTL.
const alive = `stopped_at IS NULL AND heartbeat_at + ttl > now()`

// Registration is what a node process says about itself.
type Registration struct {
	ID          string
	Weight      float64
	Version     string
	Incarnation string
	TTL         time.Duration
	// BodiesAddr is where the node serves page bodies and batches to
	// processors (--bodies-addr), as host:port others can reach; empty
	// when it does not. Kept in nodes.http_addr.
	BodiesAddr string
	// MetricsAddr is where it serves /metrics, likewise.
	MetricsAddr string
	// Capabilities say what the node can do (campaign.CapPull, ...).
	Capabilities []string
}

// HolderToken names one node process as the holder of the frontier rows
// it claims. It is unique per process (the incarnation changes at every
// start), so a node restarted under the same ID never renews what the dead
// process held.
func HolderToken(id, incarnation string) string { return id + "@" + incarnation }

// RegisterNode upserts the node's row and marks it, and its holder token,
// alive now. The row's queue, which no release reads any more, is left
// empty: nodes poll no task queue of their own.
func (s *Store) RegisterNode(ctx context.Context, r Registration) error {
	_, err := s.pool.Exec(ctx, `
		WITH n AS (
			INSERT INTO nodes (id, weight, queue, version, incarnation, ttl, started_at, heartbeat_at, stopped_at, http_addr,
				capabilities, capabilities_of, metrics_addr)
			VALUES ($1, $2, '', $3, $4, $5::bigint * interval '1 millisecond', now(), now(), NULL, nullif($7, ''), $8, $4, nullif($9, ''))
			ON CONFLICT (id) DO UPDATE SET weight = EXCLUDED.weight, queue = EXCLUDED.queue, version = EXCLUDED.version,
				incarnation = EXCLUDED.incarnation, ttl = EXCLUDED.ttl, started_at = now(), heartbeat_at = now(), stopped_at = NULL,
				http_addr = EXCLUDED.http_addr, capabilities = EXCLUDED.capabilities, capabilities_of = EXCLUDED.capabilities_of,
				metrics_addr = EXCLUDED.metrics_addr
			RETURNING ttl
		)
		INSERT INTO holders (holder, alive_until) SELECT $6, now() + ttl FROM n
		ON CONFLICT (holder) DO UPDATE SET alive_until = EXCLUDED.alive_until`,
		r.ID, r.Weight, r.Version, r.Incarnation, r.TTL.Milliseconds(), HolderToken(r.ID, r.Incarnation), r.BodiesAddr,
		nonNil(r.Capabilities), r.MetricsAddr)
	if err != nil {
		return fmt.Errorf("register node %s: %w", r.ID, err)
	}
	return nil
}

// HeartbeatNode keeps the rows the node holds alive, and, when it can
// take work (it reaches Temporal), the node itself: a node cut off from
// Temporal but not from Postgres finishes and commits what it holds while
// campaigns move its hosts elsewhere. It fails if another process has
// since registered under the same ID.
func (s *Store) HeartbeatNode(ctx context.Context, id, incarnation string, canWork bool) error {
	tag, err := s.pool.Exec(ctx, `
		WITH n AS (
			UPDATE nodes SET heartbeat_at = CASE WHEN $4 THEN now() ELSE heartbeat_at END
			WHERE id = $1 AND incarnation = $2 RETURNING ttl
		)
		INSERT INTO holders (holder, alive_until) SELECT $3, now() + ttl FROM n
		ON CONFLICT (holder) DO UPDATE SET alive_until = EXCLUDED.alive_until`,
		id, incarnation, HolderToken(id, incarnation), canWork)
	if err != nil {
		return fmt.Errorf("heartbeat node %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("heartbeat node %s: another process registered under this id", id)
	}
	return nil
}

// HeartbeatNodes is HeartbeatNode for the node identities of one process
// (worker --replicas) in one statement: a pool of a thousand identities
// costs one write a beat, not a thousand. It returns the IDs another
// process has since registered under.
func (s *Store) HeartbeatNodes(ctx context.Context, ids, incarnations []string, canWork bool) (lost []string, err error) {
	holders := make([]string, len(ids))
	for i := range ids {
		holders[i] = HolderToken(ids[i], incarnations[i])
	}
	rows, err := s.pool.Query(ctx, `
		WITH n AS (
			UPDATE nodes SET heartbeat_at = CASE WHEN $4 THEN now() ELSE heartbeat_at END
			FROM unnest($1::text[], $2::text[], $3::text[]) AS me(id, incarnation, holder)
			WHERE nodes.id = me.id AND nodes.incarnation = me.incarnation
			RETURNING nodes.id, me.holder, nodes.ttl
		), h AS (
			INSERT INTO holders (holder, alive_until) SELECT holder, now() + ttl FROM n
			ON CONFLICT (holder) DO UPDATE SET alive_until = EXCLUDED.alive_until
		)
		SELECT id FROM unnest($1::text[]) AS me(id) WHERE id NOT IN (SELECT id FROM n)`,
		ids, incarnations, holders, canWork)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d nodes: %w", len(ids), err)
	}
	lost, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d nodes: %w", len(ids), err)
	}
	return lost, nil
}

// DeregisterNode marks the node stopped, so campaigns drop it at their next
// membership refresh instead of waiting for its TTL, and ends its holder
// token: whatever it still holds may be claimed at once.
func (s *Store) DeregisterNode(ctx context.Context, id, incarnation string) error {
	_, err := s.pool.Exec(ctx, `
		WITH n AS (UPDATE nodes SET stopped_at = now() WHERE id = $1 AND incarnation = $2 RETURNING id)
		DELETE FROM holders WHERE holder = $3 AND EXISTS (SELECT 1 FROM n)`, id, incarnation, HolderToken(id, incarnation))
	if err != nil {
		return fmt.Errorf("deregister node %s: %w", id, err)
	}
	return nil
}

// Nodes lists registered nodes (only those in only, when given), sorted by
// ID, with liveness judged by the database clock.
func (s *Store) Nodes(ctx context.Context, only []string) ([]campaign.NodeInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, weight, incarnation, version, `+alive+`,
		       CASE WHEN capabilities_of = incarnation THEN capabilities ELSE '{}' END
		FROM nodes WHERE coalesce(cardinality($1::text[]), 0) = 0 OR id = ANY($1) ORDER BY id`, only)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (campaign.NodeInfo, error) {
		var n campaign.NodeInfo
		err := r.Scan(&n.ID, &n.Weight, &n.Incarnation, &n.Version, &n.Alive, &n.Capabilities)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// RecordRingChanges appends to node_weight_history.
func (s *Store) RecordRingChanges(ctx context.Context, campaignKey int64, run int, changes []campaign.RingChange) error {
	if len(changes) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	for _, c := range changes {
		batch.Queue(`INSERT INTO node_weight_history (campaign, node, old_weight, new_weight, old_state, new_state, reason, run, after_lease)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			campaignKey, c.Node, c.OldWeight, c.NewWeight, c.OldState, c.NewState, c.Reason, run, c.AfterLease)
	}
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("record %d ring changes for campaign %d: %w", len(changes), campaignKey, err)
	}
	return nil
}

// BodyServers lists the addresses of the live nodes that serve page
// bodies and batches (--bodies-addr), by node ID.
func (s *Store) BodyServers(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT http_addr FROM nodes
		WHERE http_addr IS NOT NULL AND `+alive+`
		ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("nodes serving bodies: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// FirstLiveNode is the live node whose ID sorts first, "" if none: one
// node of the cluster, agreed on by all without a lock.
func (s *Store) FirstLiveNode(ctx context.Context) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT id FROM nodes WHERE `+alive+` ORDER BY id LIMIT 1`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("first live node: %w", err)
	}
	return id, nil
}
