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
}

// maxLeaseHosts bounds the hosts one lease looks at.
const maxLeaseHosts = 20_000

// LeaseHosts leases, for each host that needs more work, what it can
// absorb, and routes it to the host's owner on the ring of p.Nodes.
//
// A host's quota is the work it can do in p.Horizon at the rate its
// politeness allows (its delay, its concurrency over the time it takes to
// answer). A host gets more only once half its quota is done, and then up
// to its quota: no host has more in flight than it can absorb before its
// next lease, and its URLs never queue behind a pile of its own. Hosts are
// taken least recently leased first, and a node's room is shared evenly
// among the hosts due for it, so none starves. Paused hosts (Retry-After,
// robots.txt unavailable) are skipped until their pause ends.
func (s *Store) LeaseHosts(ctx context.Context, p HostLeaseParams) (campaign.HostLease, error) {
	var lease campaign.HostLease
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		lease = campaign.HostLease{}
		if _, err := tx.Exec(ctx, expireLeases, p.CampaignKey); err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		budget, err := leaseBudget(ctx, tx, p.CampaignKey, p.MaxPages)
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT nextval('lease_ids')`).Scan(&lease.LeaseID); err != nil {
			return fmt.Errorf("new lease id: %w", err)
		}
		cands, err := dueHosts(ctx, tx, p)
		if err != nil {
			return err
		}
		plan := planLease(p, cands)
		lease.More = plan.more
		var fresh int64
		if len(plan.takes) > 0 {
			var leased map[int64][]int64
			if fresh, leased, err = leaseRows(ctx, tx, p, lease.LeaseID, budget, plan); err != nil {
				return err
			}
			lease.Batches = plan.batches(leased, p.BatchSize)
		}
		lease.BudgetExhausted = budget == 0 || (budget > 0 && fresh >= budget)
		if lease.Size() > 0 {
			return nil
		}
		left, err := whatIsLeft(ctx, tx, p.CampaignKey)
		if err != nil {
			return err
		}
		lease.Pending, lease.LeasedElsewhere = left.pending, left.leased
		lease.NextDue = campaign.Duration(left.nextDue)
		if plan.eta > 0 && (left.nextDue == 0 || plan.eta < left.nextDue) {
			lease.NextDue = campaign.Duration(plan.eta)
		}
		// Spent only once no URL it admitted waits (in retry backoff, or
		// handed back): those are still the campaign's to fetch.
		lease.BudgetExhausted = budget == 0 && left.pendingFresh == left.pending
		return nil
	})
	if err != nil {
		return campaign.HostLease{}, fmt.Errorf("lease hosts for campaign %d: %w", p.CampaignKey, err)
	}
	return lease, nil
}

// leaseBudget is how many URLs never leased before the campaign may still
// admit: -1 for no cap.
func leaseBudget(ctx context.Context, tx pgx.Tx, key, maxPages int64) (int64, error) {
	// NO KEY UPDATE, not UPDATE: the foreign-key checks of concurrent link
	// inserts take KEY SHARE on this row, and must not queue behind the
	// lease. The lock orders leases of one campaign.
	var admitted int64
	if err := tx.QueryRow(ctx, `SELECT admitted FROM campaigns WHERE key = $1 FOR NO KEY UPDATE`, key).Scan(&admitted); err != nil {
		return 0, fmt.Errorf("read campaign: %w", err)
	}
	if maxPages <= 0 {
		return -1, nil
	}
	return max(0, maxPages-admitted), nil
}

// hostCandidate is a host with URLs due, as leasing sees it.
type hostCandidate struct {
	id       int64
	key      string
	pace     hostPace
	inflight int
}

// hostPace is what is known of how fast a host may be fetched.
type hostPace struct {
	interval    time.Duration // least time between two starts
	latency     time.Duration // typical time to answer
	concurrency int
}

// perRequest is the time one more request of the host takes at its
// allowed rate; 0 when nothing bounds it.
func (h hostPace) perRequest() time.Duration {
	return max(h.interval, h.latency/time.Duration(max(1, h.concurrency)))
}

// quota is how many URLs of the host to keep in flight: what it can fetch
// in horizon, at least one, at most most.
func (h hostPace) quota(horizon time.Duration, most int) int {
	per := h.perRequest()
	if per <= 0 {
		return most
	}
	return min(max(int(math.Ceil(float64(horizon)/float64(per))), 1), most)
}

func dueHosts(ctx context.Context, tx pgx.Tx, p HostLeaseParams) ([]hostCandidate, error) {
	rows, err := tx.Query(ctx, `
		SELECT h.id, h.shard_key, coalesce(s.interval_ms, 0), coalesce(s.latency_ms, 0),
		       (SELECT count(*) FROM frontier f WHERE f.campaign = $1 AND f.host_id = h.id AND f.state = 'leased')
		FROM hosts h LEFT JOIN host_state s ON s.shard_key = h.shard_key
		WHERE h.campaign = $1 AND (s.paused_until IS NULL OR s.paused_until <= now())
		  AND EXISTS (SELECT 1 FROM frontier f WHERE f.campaign = $1 AND f.host_id = h.id
		              AND f.state = 'pending' AND f.next_attempt_at <= now())
		ORDER BY h.last_leased_at NULLS FIRST, h.id
		LIMIT $2`, p.CampaignKey, maxLeaseHosts)
	if err != nil {
		return nil, fmt.Errorf("hosts due: %w", err)
	}
	own := Spacing(p.MinDelay)
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hostCandidate, error) {
		var c hostCandidate
		var intervalMs, latencyMs int64
		err := r.Scan(&c.id, &c.key, &intervalMs, &latencyMs, &c.inflight)
		c.pace = hostPace{interval: max(own, fromMs(intervalMs)), latency: fromMs(latencyMs), concurrency: p.Concurrency}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("hosts due: %w", err)
	}
	return cands, nil
}

// Spacing is the least time between two starts of requests to a host that
// a delay makes: the delay with a margin of 0.5% and 10 ms, for the jitter
// between a request leaving a node and the host taking it in. Nodes pace
// hosts by it, and leasing sizes a host's work by it.
func Spacing(delay time.Duration) time.Duration {
	if delay <= 0 {
		return 0
	}
	return delay + delay/200 + 10*time.Millisecond
}

// leasePlan is what one lease takes: URLs per host, grouped by owner.
type leasePlan struct {
	takes []hostTake
	more  bool          // a node ran out of room before its due hosts did
	eta   time.Duration // until the first host held back by its quota is due
}

type hostTake struct {
	hostID int64
	key    string
	node   string
	take   int
}

// planLease decides how many URLs each candidate gets and from which node.
func planLease(p HostLeaseParams, cands []hostCandidate) leasePlan {
	var (
		plan    leasePlan
		members []ring.Node
		room    = map[string]int{}
	)
	for _, n := range p.Nodes {
		members = append(members, ring.Node{ID: n.ID, Weight: n.Weight})
		room[n.ID] = n.Batches * p.BatchSize
	}
	r := ring.New(members...)
	type due struct {
		c     hostCandidate
		owner string
		need  int
	}
	byNode := map[string][]due{}
	for _, c := range cands {
		owner, ok := r.Lookup(c.key)
		if !ok || room[owner] <= 0 {
			continue
		}
		q := c.pace.quota(p.Horizon, p.BatchSize)
		if low := q / 2; c.inflight > low {
			eta := time.Duration(c.inflight-low) * c.pace.perRequest()
			if plan.eta == 0 || eta < plan.eta {
				plan.eta = max(eta, time.Millisecond)
			}
			continue
		}
		byNode[owner] = append(byNode[owner], due{c: c, owner: owner, need: q - c.inflight})
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
		}
	}
	return plan
}

// leaseRows leases the planned URLs, shallowest first within each host,
// stopping at the page budget. It returns how many were never leased
// before, and the IDs leased per host.
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
			SELECT f.id, f.fresh, row_number() OVER (ORDER BY want.ord, f.depth, f.id) AS ord
			FROM want CROSS JOIN LATERAL (
				SELECT id, depth, first_leased_at IS NULL AS fresh FROM frontier f
				WHERE f.campaign = $1 AND f.host_id = want.host_id AND f.state = 'pending' AND f.next_attempt_at <= now()
				  AND ($4::bigint <> 0 OR f.first_leased_at IS NOT NULL)
				-- Under a page budget, URLs it already admitted (back from
				-- retry backoff, or handed back) first: fresh ones may not fit.
				ORDER BY CASE WHEN $4::bigint >= 0 THEN f.first_leased_at IS NULL ELSE false END, f.depth, f.id
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
	leased := make([]int64, 0, len(byHost))
	for hostID := range byHost {
		leased = append(leased, hostID)
	}
	if len(leased) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE hosts SET last_leased_at = now() WHERE id = ANY($1)`, leased); err != nil {
			return 0, nil, fmt.Errorf("mark hosts leased: %w", err)
		}
	}
	if fresh > 0 {
		if _, err := tx.Exec(ctx, `UPDATE campaigns SET admitted = admitted + $2 WHERE key = $1`, p.CampaignKey, fresh); err != nil {
			return 0, nil, fmt.Errorf("count admitted: %w", err)
		}
	}
	return fresh, byHost, nil
}

// batches cuts what was leased into batches of at most size URLs per node,
// a host's URLs in ID order; a host is split only at a batch's end.
func (plan leasePlan) batches(leased map[int64][]int64, size int) []campaign.NodeBatch {
	var out []campaign.NodeBatch
	var cur *campaign.NodeBatch
	n := 0
	for _, t := range plan.takes {
		ids := leased[t.hostID]
		slices.Sort(ids)
		if cur != nil && cur.Node != t.node {
			cur = nil
		}
		for len(ids) > 0 {
			if cur == nil || n == size {
				out = append(out, campaign.NodeBatch{Node: t.node})
				cur, n = &out[len(out)-1], 0
			}
			k := min(len(ids), size-n)
			cur.Groups = append(cur.Groups, campaign.LeaseGroup{ShardKey: t.key, IDs: ids[:k]})
			n += k
			ids = ids[k:]
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Groups, func(a, b campaign.LeaseGroup) int { return cmp.Compare(a.ShardKey, b.ShardKey) })
	}
	return out
}
