package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/politeness"
	"github.com/spiderpool/spiderpool/ring"
)

// HostLeaseParams shapes one LeaseHosts.
type HostLeaseParams struct {
	CampaignKey int64
	// Nodes are the ring's members and the batches each has room for.
	Nodes     []campaign.LeaseNode
	BatchSize int
	Horizon   time.Duration
	TTL       time.Duration
	MaxPages  int64 // 0: no cap
	// MinDelay and Concurrency are the campaign's own politeness.
	MinDelay    time.Duration
	Concurrency int
	// Assign routes the batches into node_batches for the nodes to take
	// (a pool run): Nodes' Batches are then counted here, from what each
	// node holds, and only live nodes that pull are routed to.
	Assign *campaign.Assign
	// Render reports whether a host (its shard key) is a render host: its
	// URLs go only to nodes with a browser (LeaseNode.Browser). nil: none
	// is.
	Render func(key string) bool
}

// browserRecheck is how soon a lease that found only render hosts due,
// and no node with a browser, says to look again.
const browserRecheck = 10 * time.Second

// maxLeaseHosts bounds the hosts one lease looks at, and with them what a
// lease costs however large the frontier.
const maxLeaseHosts = 20_000

// LeaseHosts leases, for each host that needs more work, what it can
// absorb, and routes it to the host's owner on the ring of p.Nodes.
//
// A host's quota is the work it can do in p.Horizon at the rate its
// politeness allows (its delay, its concurrency over the time it takes to
// answer). A host gets more only once half its quota is done, and then up
// to its quota: no host has more in flight than it can absorb before its
// next lease, and its URLs never queue behind a pile of its own. Hosts are
// taken in turn (see dueHosts), and a node's room is shared evenly among
// the hosts due for it, so none starves. Paused hosts (Retry-After,
// robots.txt unavailable) are skipped until their pause ends.
//
// Every statement it runs reads through an index, and no more of it than
// the hosts its walk passes (at most maxLeaseHosts with URLs due, and those
// whose pending URLs are all paused or put off), the URLs it leases or
// expires, and the campaign's holders: the cost of a lease does not grow
// with the frontier (docs/scale.md has the plans at 10M rows).
func (s *Store) LeaseHosts(ctx context.Context, p HostLeaseParams) (campaign.HostLease, error) {
	var lease campaign.HostLease
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		lease = campaign.HostLease{}
		if p.Assign != nil {
			if err := expireNodeBatches(ctx, tx, p.CampaignKey); err != nil {
				return err
			}
		}
		if err := expireLeases(ctx, tx, p.CampaignKey); err != nil {
			return err
		}
		c, err := lockCampaign(ctx, tx, p.CampaignKey, p.MaxPages)
		if err != nil {
			return err
		}
		p := p
		if p.Assign != nil {
			if p.Nodes, err = poolRooms(ctx, tx, p.CampaignKey, p.Nodes, p.Assign.Window); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, `SELECT nextval('lease_ids')`).Scan(&lease.LeaseID); err != nil {
			return fmt.Errorf("new lease id: %w", err)
		}
		cands, err := dueHosts(ctx, tx, p.CampaignKey, c.cursor, maxLeaseHosts)
		if err != nil {
			return err
		}
		// The campaign's own politeness is the least a host's pace can be.
		own := politeness.Spacing(p.MinDelay)
		for i := range cands {
			pace := &cands[i].pace
			pace.Interval, pace.Concurrency = max(own, pace.Interval), p.Concurrency
		}
		plan := planLease(p, cands)
		lease.More, lease.RenderWaiting = plan.more, plan.renderWaiting
		var fresh int64
		if len(plan.takes) > 0 {
			var leased map[int64][]int64
			if fresh, leased, err = leaseRows(ctx, tx, p, lease.LeaseID, c.budget, plan); err != nil {
				return err
			}
			lease.Batches = plan.batches(leased, p.BatchSize)
			if p.Assign != nil {
				if lease.Routed, err = routeBatches(ctx, tx, p.CampaignKey, lease.LeaseID, p.TTL, *p.Assign, lease.Batches); err != nil {
					return err
				}
				lease.Batches = nil
			}
		}
		if err := c.advance(ctx, tx, p.CampaignKey, plan.last, fresh); err != nil {
			return err
		}
		lease.BudgetExhausted = c.budget == 0 || (c.budget > 0 && fresh >= c.budget)
		if lease.Size() > 0 || lease.Routed.URLs > 0 {
			return nil
		}
		return dryLease(ctx, tx, p.CampaignKey, c.budget, len(cands), plan, &lease)
	})
	if err != nil {
		return campaign.HostLease{}, fmt.Errorf("lease hosts for campaign %d: %w", p.CampaignKey, err)
	}
	return lease, nil
}

// dryLease completes a lease that leased nothing: what is left of the
// campaign, and when a lease is next worth making. due is how many hosts
// the walk found due.
func dryLease(ctx context.Context, tx pgx.Tx, key, budget int64, due int, plan leasePlan, lease *campaign.HostLease) error {
	left, err := whatIsLeft(ctx, tx, key)
	if err != nil {
		return err
	}
	lease.Pending, lease.LeasedElsewhere = left.pending, left.leased
	lease.NextDue = campaign.Duration(left.nextDue)
	if due > plan.renderWaiting {
		lease.NextDue = 0 // due now, but held back: by a quota, or a node's full window
	}
	if plan.eta > 0 && (lease.NextDue == 0 || plan.eta < lease.NextDue.D()) {
		lease.NextDue = campaign.Duration(plan.eta)
	}
	if due > 0 && due == plan.renderWaiting && lease.NextDue == 0 {
		// Only hosts that wait for a browser node are due: a node that
		// joins changes the ring, and the run leases at once then.
		lease.NextDue = campaign.Duration(browserRecheck)
	}
	// Spent only once no URL it admitted waits (in retry backoff, or
	// handed back): those are still the campaign's to fetch.
	lease.BudgetExhausted = budget == 0 && !left.readmitted
	return nil
}

// leaseState is what a lease reads from, and writes back to, its
// campaign's row.
type leaseState struct {
	// budget is how many URLs never leased before the campaign may still
	// admit: -1 for no cap.
	budget int64
	// cursor is the host where the last lease's walk stopped.
	cursor int64
}

// lockCampaign reads the campaign's lease state, and locks its row: the
// lock orders the leases of one campaign.
func lockCampaign(ctx context.Context, tx pgx.Tx, key, maxPages int64) (leaseState, error) {
	// NO KEY UPDATE, not UPDATE: the foreign-key checks of concurrent link
	// inserts take KEY SHARE on this row, and must not queue behind the
	// lease.
	var admitted int64
	c := leaseState{budget: -1}
	if err := tx.QueryRow(ctx, `SELECT admitted, lease_cursor FROM campaigns WHERE key = $1 FOR NO KEY UPDATE`, key).
		Scan(&admitted, &c.cursor); err != nil {
		return c, fmt.Errorf("read campaign: %w", err)
	}
	if maxPages > 0 {
		c.budget = max(0, maxPages-admitted)
	}
	return c, nil
}

// advance records a lease: the next walk starts after host last (0: where
// this one started), and fresh more URLs are admitted.
func (c leaseState) advance(ctx context.Context, tx pgx.Tx, key, last, fresh int64) error {
	if last == 0 && fresh == 0 {
		return nil
	}
	if last == 0 {
		last = c.cursor
	}
	if _, err := tx.Exec(ctx, `UPDATE campaigns SET lease_cursor = $2, admitted = admitted + $3 WHERE key = $1`, key, last, fresh); err != nil {
		return fmt.Errorf("record lease: %w", err)
	}
	return nil
}

// expireLeases returns to pending the leased rows of the campaign that
// nobody can still settle: unclaimed ones past their lease's expiry, and
// claimed ones whose holder stopped renewing (its node died, or lost
// Postgres and with it the right to commit). A row a live holder keeps is
// never taken from it, however long its host makes it wait.
//
// It reads the expired rows, and one index entry per holder of the
// campaign's rows (about one per node), never all the rows in flight.
func expireLeases(ctx context.Context, tx pgx.Tx, key int64) error {
	if _, err := tx.Exec(ctx, `
		UPDATE frontier SET state = 'pending', lease_id = NULL, lease_expires_at = NULL
		WHERE campaign = $1 AND state = 'leased' AND lease_holder IS NULL AND lease_expires_at < now()`, key); err != nil {
		return fmt.Errorf("expire unclaimed leases: %w", err)
	}
	// The holders, by a skip scan over frontier_held: one probe each.
	rows, err := tx.Query(ctx, `
		WITH RECURSIVE held(holder) AS (
			(SELECT lease_holder FROM frontier
			 WHERE campaign = $1 AND state = 'leased' AND lease_holder IS NOT NULL
			 ORDER BY lease_holder LIMIT 1)
			UNION ALL
			SELECT (SELECT f.lease_holder FROM frontier f
			        WHERE f.campaign = $1 AND f.state = 'leased' AND f.lease_holder > held.holder
			        ORDER BY f.lease_holder LIMIT 1)
			FROM held WHERE held.holder IS NOT NULL
		)
		SELECT holder FROM held
		WHERE holder IS NOT NULL
		  AND NOT EXISTS (SELECT FROM holders h WHERE h.holder = held.holder AND h.alive_until > now())`, key)
	if err != nil {
		return fmt.Errorf("find dead holders: %w", err)
	}
	dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find dead holders: %w", err)
	}
	if len(dead) == 0 {
		return nil
	}
	// The holders as a value, not a subquery: the planner then reads
	// their rows only, not every held row to drop the live holders' ones.
	if _, err := tx.Exec(ctx, `
		UPDATE frontier SET state = 'pending', lease_id = NULL, lease_holder = NULL, lease_expires_at = NULL
		WHERE campaign = $1 AND state = 'leased' AND lease_holder = ANY ($2::text[])`, key, dead); err != nil {
		return fmt.Errorf("expire the leases of %d dead holders: %w", len(dead), err)
	}
	return nil
}

// hostCandidate is a host with URLs due, as leasing sees it.
type hostCandidate struct {
	id       int64
	key      string
	pace     politeness.Pace
	inflight int
}

// dueHosts returns up to limit hosts of the campaign that have URLs due
// and are not paused, in the order of a walk round the campaign's hosts
// with pending URLs (by ID) that starts after host after and wraps.
//
// A walk, not a sort: the walk reads frontier_pending one entry per host
// (a skip scan), stops at limit, and never meets a host with nothing
// pending, however many the campaign has finished. Each lease resumes
// where the last one's work stopped (leaseState.cursor), so every host
// with work is reached in turn, whatever its ID, and none starves.
func dueHosts(ctx context.Context, tx pgx.Tx, key, after int64, limit int) ([]hostCandidate, error) {
	cands, err := walkHosts(ctx, tx, key, after, math.MaxInt64, limit)
	if err != nil {
		return nil, err
	}
	if len(cands) < limit && after > 0 {
		wrapped, err := walkHosts(ctx, tx, key, 0, after, limit-len(cands))
		if err != nil {
			return nil, err
		}
		cands = append(cands, wrapped...)
	}
	return cands, nil
}

// walkHosts is dueHosts over hosts with IDs in (from, to].
func walkHosts(ctx context.Context, tx pgx.Tx, key, from, to int64, limit int) ([]hostCandidate, error) {
	// The recursive CTE yields one host a step, in ID order, and only as
	// many as LIMIT asks for; LATERAL keeps that order (a nested loop,
	// one primary-key lookup a host).
	rows, err := tx.Query(ctx, `
		WITH RECURSIVE walk(host_id) AS (
			(SELECT f.host_id FROM frontier f
			 WHERE f.campaign = $1 AND f.state = 'pending' AND f.host_id > $2 AND f.host_id <= $3
			 ORDER BY f.host_id LIMIT 1)
			UNION ALL
			SELECT (SELECT f.host_id FROM frontier f
			        WHERE f.campaign = $1 AND f.state = 'pending' AND f.host_id > w.host_id AND f.host_id <= $3
			        ORDER BY f.host_id LIMIT 1)
			FROM walk w WHERE w.host_id IS NOT NULL
		)
		SELECT h.id, h.shard_key, h.interval_ms, h.latency_ms,
		       (SELECT count(*) FROM frontier f WHERE f.campaign = $1 AND f.host_id = h.id AND f.state = 'leased')
		FROM walk w CROSS JOIN LATERAL (
			SELECT h.id, h.shard_key, coalesce(s.interval_ms, 0) AS interval_ms, coalesce(s.latency_ms, 0) AS latency_ms
			FROM hosts h LEFT JOIN host_state s ON s.shard_key = h.shard_key
			WHERE h.id = w.host_id AND (s.paused_until IS NULL OR s.paused_until <= now())
			  AND EXISTS (SELECT 1 FROM frontier f WHERE f.campaign = $1 AND f.host_id = h.id
			              AND f.state = 'pending' AND f.next_attempt_at <= now())
		) h
		LIMIT $4`, key, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("hosts due: %w", err)
	}
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hostCandidate, error) {
		var c hostCandidate
		var intervalMs, latencyMs int64
		err := r.Scan(&c.id, &c.key, &intervalMs, &latencyMs, &c.inflight)
		c.pace = politeness.Pace{Interval: fromMs(intervalMs), Latency: fromMs(latencyMs)}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("hosts due: %w", err)
	}
	return cands, nil
}

// leasePlan is what one lease takes: URLs per host, grouped by owner.
type leasePlan struct {
	takes []hostTake
	more  bool          // a node ran out of room before its due hosts did
	eta   time.Duration // until the first host held back by its quota is due
	last  int64         // the host given work that the walk reached last; 0 if none
	// renderWaiting counts the render hosts held back for want of a node
	// with a browser.
	renderWaiting int
}

type hostTake struct {
	hostID int64
	key    string
	node   string
	take   int
}

// planLease decides how many URLs each candidate gets and from which node.
//
// A render host (p.Render) is looked up on the ring of the nodes with a
// browser alone: the same weighted hash over fewer members, so drains,
// weights and failover work among them as on the full ring. With no such
// node, the host is held back and counted (its URLs stay pending), and the
// walk passes it as it passes a host given work: a walk full of render
// hosts would otherwise keep the cursor where it is, and the hosts past
// them would wait for a browser node too.
func planLease(p HostLeaseParams, cands []hostCandidate) leasePlan {
	var (
		plan              leasePlan
		members, browsers []ring.Node
		room              = map[string]int{}
	)
	for _, n := range p.Nodes {
		m := ring.Node{ID: n.ID, Weight: n.Weight}
		members = append(members, m)
		if n.Browser {
			browsers = append(browsers, m)
		}
		room[n.ID] = n.Batches * p.BatchSize
	}
	all, withBrowser := ring.New(members...), ring.New(browsers...)
	type due struct {
		c     hostCandidate
		walk  int // its place in the walk
		owner string
		need  int
	}
	byNode := map[string][]due{}
	lastWalk := -1
	for i, c := range cands {
		r := all
		renders := p.Render != nil && p.Render(c.key)
		if renders {
			r = withBrowser
		}
		owner, ok := r.Lookup(c.key)
		if !ok && renders {
			plan.renderWaiting++
			lastWalk, plan.last = i, c.id
			continue
		}
		if !ok || room[owner] <= 0 {
			continue
		}
		q := c.pace.Quota(p.Horizon, p.BatchSize)
		if low := q / 2; c.inflight > low {
			eta := time.Duration(c.inflight-low) * c.pace.PerRequest()
			if plan.eta == 0 || eta < plan.eta {
				plan.eta = max(eta, time.Millisecond)
			}
			continue
		}
		byNode[owner] = append(byNode[owner], due{c: c, walk: i, owner: owner, need: q - c.inflight})
	}
	for _, n := range p.Nodes {
		hosts := byNode[n.ID]
		if len(hosts) == 0 {
			continue
		}
		left := room[n.ID]
		share := max(1, (left+len(hosts)-1)/len(hosts))
		for _, h := range hosts {
			if left == 0 {
				plan.more = true
				break
			}
			take := min(h.need, share, left)
			left -= take
			plan.takes = append(plan.takes, hostTake{hostID: h.c.id, key: h.c.key, node: n.ID, take: take})
			if h.walk > lastWalk {
				lastWalk, plan.last = h.walk, h.c.id
			}
		}
	}
	return plan
}

// leaseRows leases the planned URLs, shallowest first within each host,
// stopping at the page budget. It returns how many were never leased
// before (the caller counts them admitted), and the IDs leased per host.
func leaseRows(ctx context.Context, tx pgx.Tx, p HostLeaseParams, leaseID, budget int64, plan leasePlan) (int64, map[int64][]int64, error) {
	hostIDs := make([]int64, len(plan.takes))
	takes := make([]int32, len(plan.takes))
	for i, t := range plan.takes {
		hostIDs[i], takes[i] = t.hostID, int32(t.take)
	}
	rows, err := tx.Query(ctx, `
		WITH want AS (
			SELECT * FROM unnest($2::bigint[], $3::int[]) WITH ORDINALITY AS w(host_id, take, ord)
		), cand AS (
			SELECT f.id, f.fresh, row_number() OVER (ORDER BY want.ord, f.priority DESC, f.depth, f.id) AS ord
			FROM want CROSS JOIN LATERAL (
				-- Under a page budget, URLs it already admitted (back from
				-- retry backoff, or handed back) first: fresh ones may not
				-- fit. Each part reads its index in order, and only as far
				-- as the take: a sort would read every pending URL of the
				-- host.
				(SELECT id, priority, depth, false AS fresh FROM frontier f
				 WHERE $4::bigint >= 0 AND f.campaign = $1 AND f.host_id = want.host_id AND f.state = 'pending'
				   AND f.first_leased_at IS NOT NULL AND f.next_attempt_at <= now()
				 ORDER BY f.priority DESC, f.depth, f.id LIMIT want.take)
				UNION ALL
				(SELECT id, priority, depth, first_leased_at IS NULL AS fresh FROM frontier f
				 WHERE f.campaign = $1 AND f.host_id = want.host_id AND f.state = 'pending' AND f.next_attempt_at <= now()
				   AND ($4::bigint < 0 OR ($4::bigint > 0 AND f.first_leased_at IS NULL))
				 ORDER BY f.priority DESC, f.depth, f.id LIMIT want.take)
				LIMIT want.take
			) f
		), picked AS (
			SELECT id, fresh FROM (
				SELECT id, fresh, sum(fresh::int) OVER (ORDER BY ord) AS fresh_n FROM cand
			) b
			WHERE NOT fresh OR $4::bigint < 0 OR fresh_n <= $4::bigint
		)
		UPDATE frontier f
		SET state = 'leased', lease_id = $5, lease_holder = NULL, leased_at = now(),
		    first_leased_at = coalesce(f.first_leased_at, now()),
		    lease_expires_at = now() + $6::bigint * interval '1 millisecond'
		FROM picked
		WHERE f.id = picked.id AND f.state = 'pending'
		RETURNING f.id, f.host_id, picked.fresh`,
		p.CampaignKey, hostIDs, takes, budget, leaseID, p.TTL.Milliseconds())
	if err != nil {
		return 0, nil, fmt.Errorf("lease: %w", err)
	}
	byHost := map[int64][]int64{}
	var fresh int64
	for rows.Next() {
		var id, hostID int64
		var isFresh bool
		if err := rows.Scan(&id, &hostID, &isFresh); err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("lease: %w", err)
		}
		byHost[hostID] = append(byHost[hostID], id)
		if isFresh {
			fresh++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("lease: %w", err)
	}
	return fresh, byHost, nil
}

// batches cuts what was leased into batches of at most size URLs per node.
// A node's batches share its hosts: the first holds the first part of
// every host's URLs, the next the next part, and so on (a host's URLs in
// ID order throughout). A node runs its hosts side by side, and each host
// its URLs in batch order (see hostQueue.push), so its batches end one
// after another, each end making room for the next lease while the
// others run. Cut host by host, they ran side by side and ended together:
// the node's window emptied before a lease, a look of the workflow's every
// half second or so, could fill it again.
func (plan leasePlan) batches(leased map[int64][]int64, size int) []campaign.NodeBatch {
	var out []campaign.NodeBatch
	for start := 0; start < len(plan.takes); {
		node := plan.takes[start].node
		end := start
		for end < len(plan.takes) && plan.takes[end].node == node {
			end++
		}
		out = append(out, nodeBatches(node, plan.takes[start:end], leased, size)...)
		start = end
	}
	return out
}

// nodeBatches cuts one node's takes into batches of at most size URLs,
// each host's URLs spread over them in order: a URL goes by how far into
// its host's URLs it stands.
func nodeBatches(node string, takes []hostTake, leased map[int64][]int64, size int) []campaign.NodeBatch {
	type place struct {
		at   float64 // how far into its host's URLs, 0 to 1
		take int     // its host's place in the walk
		id   int64
	}
	var places []place
	for i, t := range takes {
		ids := leased[t.hostID]
		slices.Sort(ids)
		for j, id := range ids {
			places = append(places, place{at: float64(j) / float64(len(ids)), take: i, id: id})
		}
	}
	slices.SortFunc(places, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.take, b.take))
	})
	var out []campaign.NodeBatch
	for len(places) > 0 {
		cut := places[:min(size, len(places))]
		places = places[len(cut):]
		byHost := map[int][]int64{}
		for _, pl := range cut {
			byHost[pl.take] = append(byHost[pl.take], pl.id)
		}
		b := campaign.NodeBatch{Node: node}
		for i, ids := range byHost {
			b.Groups = append(b.Groups, campaign.LeaseGroup{ShardKey: takes[i].key, IDs: ids})
		}
		slices.SortFunc(b.Groups, func(a, b campaign.LeaseGroup) int { return cmp.Compare(a.ShardKey, b.ShardKey) })
		out = append(out, b)
	}
	return out
}
