package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
)

// URL states, as in the url_state enum.
const (
	Pending  = "pending"
	Leased   = "leased"
	Fetched  = "fetched"
	Failed   = "failed"
	Excluded = "excluded"
)

// NewURL is a URL to add to the frontier. Adding one whose fingerprint the
// campaign already has inserts nothing: that is the dedup. It may still
// give the known URL a shallower depth (see InsertURLs).
type NewURL struct {
	Fingerprint uint64
	URL         string // canonical
	// FoundAs is the URL as linked (URL but for the query, in the link's
	// own order), if different: what is requested.
	FoundAs   string
	ShardKey  string
	Depth     int
	Redirects int
	ParentID  int64 // 0 for seeds
	// ExcludedBecause, when set, records the URL as excluded with this
	// reason instead of queueing it (a redirect chain past its cap).
	ExcludedBecause string
	// Kind is KindPage ("" too) or KindRequisite.
	Kind string
	// Priority orders the URL among its host's pending ones, higher first
	// (see campaign.PriorityRule).
	Priority int16
	// AddedBy names the add_urls request that stores the URL: InsertURLsNew
	// counts as new the rows the same request stored before (a retry).
	AddedBy string
}

// foundAs is the found_as column: NULL unless the URL as linked differs
// from the canonical one.
func (u *NewURL) foundAs() *string {
	if u.FoundAs == "" || u.FoundAs == u.URL {
		return nil
	}
	return &u.FoundAs
}

// parent is the parent_id column: NULL for a seed.
func (u *NewURL) parent() *int64 {
	if u.ParentID == 0 {
		return nil
	}
	return &u.ParentID
}

// InsertURLs adds urls to the campaign's frontier and returns how many were
// new.
//
// Which link to a URL turns up first must not decide how deep the URL is,
// nor whether it is crawled at all: a queued (not excluded) link shallower
// than a URL already known gives it its depth, parent and redirects, if
// the URL still waits to be crawled (pending) or was excluded only for
// being too deep, which queues it again. URLs leased, fetched, failed or
// excluded for any other reason keep their row. Such URLs are not new,
// and not counted: what is counted is rows inserted, the campaign's
// "discovered".
func (s *Store) InsertURLs(ctx context.Context, campaignKey int64, urls []NewURL) (int, error) {
	inserted, err := s.InsertURLsNew(ctx, campaignKey, urls)
	return len(inserted), err
}

// InsertURLsNew is InsertURLs saying which URLs were new: the
// fingerprints of the rows it inserted.
func (s *Store) InsertURLsNew(ctx context.Context, campaignKey int64, urls []NewURL) (map[int64]bool, error) {
	urls = oneLinkPerURL(urls)
	var inserted map[int64]bool
	err := s.retry(ctx, func() error {
		var err error
		inserted, err = s.insertURLs(ctx, campaignKey, urls)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert %d URLs for campaign %d: %w", len(urls), campaignKey, err)
	}
	s.analyzeAsItGrows(len(inserted))
	if len(inserted) == len(urls) {
		return inserted, nil // all new: none known to lower
	}
	if err := s.storedByTheSameRequest(ctx, campaignKey, urls, inserted); err != nil {
		return nil, err
	}
	// Only the links to URLs already known can lower a depth. A retry of
	// its own, so that one does not run the insert again and count its
	// rows as known.
	known := slices.DeleteFunc(urls, func(u NewURL) bool { return inserted[int64(u.Fingerprint)] })
	if err := s.retry(ctx, func() error { return s.takeShallowerLinks(ctx, campaignKey, known) }); err != nil {
		return nil, fmt.Errorf("lower the depth of known URLs for campaign %d: %w", campaignKey, err)
	}
	return inserted, nil
}

// storedByTheSameRequest adds to inserted the URLs not inserted now that
// the add_urls request naming them (NewURL.AddedBy) stored before: an
// earlier attempt of the same request, whose insert committed.
func (s *Store) storedByTheSameRequest(ctx context.Context, campaignKey int64, urls []NewURL, inserted map[int64]bool) error {
	byRequest := map[string][]int64{}
	for _, u := range urls {
		if fp := int64(u.Fingerprint); u.AddedBy != "" && !inserted[fp] {
			byRequest[u.AddedBy] = append(byRequest[u.AddedBy], fp)
		}
	}
	for request, fps := range byRequest {
		rows, err := s.pool.Query(ctx, `
			SELECT fingerprint FROM frontier WHERE campaign = $1 AND fingerprint = ANY($2) AND added_by = $3`,
			campaignKey, fps, request)
		if err != nil {
			return fmt.Errorf("URLs stored by request %s: %w", request, err)
		}
		var fp int64
		if _, err := pgx.ForEachRow(rows, []any{&fp}, func() error { inserted[fp] = true; return nil }); err != nil {
			return fmt.Errorf("URLs stored by request %s: %w", request, err)
		}
	}
	return nil
}

// oneLinkPerURL keeps the link to each URL that InsertURLs should take:
// queued before excluded, then the shallowest, then the one with the
// fewest redirects. The links come out in fingerprint order, so that
// concurrent batches discovering the same links take their locks in one
// order and cannot deadlock.
func oneLinkPerURL(urls []NewURL) []NewURL {
	excluded := func(u NewURL) int {
		if u.ExcludedBecause != "" {
			return 1
		}
		return 0
	}
	urls = slices.Clone(urls)
	slices.SortFunc(urls, func(a, b NewURL) int {
		return cmp.Or(
			cmp.Compare(a.Fingerprint, b.Fingerprint),
			cmp.Compare(excluded(a), excluded(b)),
			cmp.Compare(a.Depth, b.Depth),
			cmp.Compare(a.Redirects, b.Redirects))
	})
	return slices.CompactFunc(urls, func(a, b NewURL) bool { return a.Fingerprint == b.Fingerprint })
}

// insertURLs adds hosts not yet known, then the URLs (one link per URL, in
// fingerprint order), each statement on its own: a hosts row without its
// URLs is harmless, and both are idempotent, so a retry after a failure
// between them is safe. It returns the fingerprints of the rows inserted.
func (s *Store) insertURLs(ctx context.Context, campaignKey int64, urls []NewURL) (map[int64]bool, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	if err := s.addHosts(ctx, campaignKey, s.unknownHosts(campaignKey, urls)); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, insertURLsSQL, append([]any{campaignKey}, newURLRows(urls).args()...)...)
	if err != nil {
		return nil, fmt.Errorf("add URLs: %w", err)
	}
	inserted := make(map[int64]bool, len(urls))
	var fp int64
	if _, err := pgx.ForEachRow(rows, []any{&fp}, func() error { inserted[fp] = true; return nil }); err != nil {
		return nil, fmt.Errorf("add URLs: %w", err)
	}
	return inserted, nil
}

// unknownHosts are the shard keys of urls this store has not added to
// the campaign yet, sorted (in key order, for the same reason links go in
// fingerprint order) and without repeats.
func (s *Store) unknownHosts(campaignKey int64, urls []NewURL) []string {
	keys := make([]string, 0, 4)
	for _, u := range urls {
		if _, known := s.knownHosts.Load(hostKey(campaignKey, u.ShardKey)); !known {
			keys = append(keys, u.ShardKey)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// addHosts adds the campaign's hosts keys, if new, and remembers them as
// known. A campaign new to a host may be stricter than those crawling it
// already: the nodes holding it hear of that at once (see HostPolicies),
// as they do of a campaign starting.
func (s *Store) addHosts(ctx context.Context, campaignKey int64, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `
		WITH added AS (
			INSERT INTO hosts (campaign, shard_key)
			SELECT $1, k FROM unnest($2::text[]) AS k
			ON CONFLICT (campaign, shard_key) DO NOTHING
			RETURNING 1
		)
		SELECT pg_notify($3, $1::text) WHERE EXISTS (SELECT FROM added)`, campaignKey, keys, PolicyChannel); err != nil {
		return fmt.Errorf("add hosts: %w", err)
	}
	for _, k := range keys {
		s.knownHosts.Store(hostKey(campaignKey, k), struct{}{})
	}
	return nil
}

// urlRows are the links of an insert as the columns of insertURLsSQL
// ($2-$12).
type urlRows struct {
	fps               []int64
	canon, shard      []string
	found             []*string
	depth, redirects  []int32
	parent            []*int64
	excluded, addedBy []*string
	kind              []string
	priority          []int16
}

// newURLRows lays out urls as columns; the nullable ones point into urls.
func newURLRows(urls []NewURL) urlRows {
	n := len(urls)
	r := urlRows{
		fps: make([]int64, n), canon: make([]string, n), shard: make([]string, n), found: make([]*string, n),
		depth: make([]int32, n), redirects: make([]int32, n), parent: make([]*int64, n),
		excluded: make([]*string, n), addedBy: make([]*string, n), kind: make([]string, n), priority: make([]int16, n),
	}
	for i := range urls {
		u := &urls[i]
		r.fps[i], r.canon[i], r.shard[i], r.found[i] = int64(u.Fingerprint), u.URL, u.ShardKey, u.foundAs()
		r.depth[i], r.redirects[i], r.parent[i] = int32(u.Depth), int32(u.Redirects), u.parent()
		r.kind[i], r.priority[i] = u.kind(), u.Priority
		if u.ExcludedBecause != "" {
			r.excluded[i] = &u.ExcludedBecause
		}
		if u.AddedBy != "" {
			r.addedBy[i] = &u.AddedBy
		}
	}
	return r
}

// args are the columns, $2 to $12 of insertURLsSQL.
func (r urlRows) args() []any {
	return []any{r.fps, r.canon, r.found, r.shard, r.depth, r.redirects, r.parent, r.excluded, r.kind, r.priority, r.addedBy}
}

// insertURLsSQL inserts the links ($2-$12) of campaign $1 whose URL it
// does not have, in order, under hosts already added, and returns their
// fingerprints. A link recorded excluded is finished as it is inserted.
const insertURLsSQL = `
		INSERT INTO frontier (campaign, fingerprint, url, found_as, host_id, shard_key, depth, redirects, parent_id,
		                      state, last_error, finished_at, kind, priority, added_by)
		SELECT $1, l.fp, l.url, l.found, h.id, l.key, l.depth, l.redirects, l.parent,
		       CASE WHEN l.excluded IS NULL THEN 'pending' ELSE 'excluded' END::url_state, l.excluded,
		       CASE WHEN l.excluded IS NOT NULL THEN now() END, l.kind, l.priority, l.added_by
		FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::int[], $7::int[], $8::bigint[], $9::text[], $10::text[],
		            $11::smallint[], $12::text[])
		     WITH ORDINALITY AS l(fp, url, found, key, depth, redirects, parent, excluded, kind, priority, added_by, ord)
		JOIN hosts h ON h.campaign = $1 AND h.shard_key = l.key
		ORDER BY l.ord
		ON CONFLICT (campaign, fingerprint) DO NOTHING
		RETURNING fingerprint`

// RaisePriority gives the campaign's pending URLs among fingerprints at
// least priority, so that their host's next lease takes them first.
func (s *Store) RaisePriority(ctx context.Context, campaignKey int64, fingerprints []int64, priority int16) error {
	if priority <= 0 || len(fingerprints) == 0 {
		return nil
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, `
			UPDATE frontier SET priority = $3
			WHERE campaign = $1 AND fingerprint = ANY($2) AND state = 'pending' AND priority < $3`,
			campaignKey, fingerprints, priority)
		return err
	})
	if err != nil {
		return fmt.Errorf("raise the priority of %d URLs of campaign %d: %w", len(fingerprints), campaignKey, err)
	}
	return nil
}

// readmittedReason is the one exclusion a shallower link undoes: being too
// deep is a fact about the path that found a URL, not about the URL.
const readmittedReason = string(crawl.TooDeep)

// takeShallowerLinks gives known URLs the depth, parent and redirects of
// the queued links in urls that are shallower, if they are pending or
// excluded as too deep (those are queued again, due now).
//
// It is a statement of its own, after the insert, rather than the
// insert's ON CONFLICT DO UPDATE: that would lock, and so write to, the
// row of every link already known (most links a page has), and make
// concurrent commits of the same links queue behind each other. Here only
// the rows that change are locked, in fingerprint order; and since it
// runs after the insert has waited out any concurrent insert of the same
// URLs, it sees their rows, so a shallow link is never lost to a deep one
// committed at the same time. A concurrent change of a row (a lease, a
// shallower link) is waited for and the row checked again.
func (s *Store) takeShallowerLinks(ctx context.Context, campaignKey int64, urls []NewURL) error {
	var (
		fps              []int64
		depth, redirects []int32
		parent           []*int64
		found            []*string
	)
	for i, u := range urls {
		if u.ExcludedBecause != "" {
			continue // not a path the crawl takes
		}
		fps = append(fps, int64(u.Fingerprint))
		depth = append(depth, int32(u.Depth))
		redirects = append(redirects, int32(u.Redirects))
		parent = append(parent, urls[i].parent())
		found = append(found, urls[i].foundAs())
	}
	if len(fps) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		WITH closer AS (
			SELECT f.id, l.depth, l.redirects, l.parent, l.found
			FROM unnest($2::bigint[], $3::int[], $4::int[], $5::bigint[], $6::text[])
			     AS l(fp, depth, redirects, parent, found)
			JOIN frontier f ON f.campaign = $1 AND f.fingerprint = l.fp
			WHERE f.depth > l.depth AND (f.state = 'pending' OR (f.state = 'excluded' AND f.last_error = $7))
			ORDER BY f.fingerprint
			FOR UPDATE OF f
		)
		UPDATE frontier f
		SET depth = c.depth, redirects = c.redirects, parent_id = c.parent, found_as = c.found,
		    next_attempt_at = CASE WHEN f.state = 'excluded' THEN now() ELSE f.next_attempt_at END,
		    state = 'pending', last_error = NULL, finished_at = NULL
		FROM closer c
		WHERE f.id = c.id`,
		campaignKey, fps, depth, redirects, parent, found, readmittedReason)
	if err != nil {
		return fmt.Errorf("take shallower links: %w", err)
	}
	return nil
}

// leftCountCap bounds the counts of what a campaign has left: exact below
// it, at least it above. Callers ask whether anything is left, and
// people how much roughly; an exact count would read every pending row
// at each idle poll.
const leftCountCap = 10_000

// leftover is what a campaign's frontier still holds when nothing is due.
type leftover struct {
	// pending and leased count up to leftCountCap.
	pending, leased int64
	// readmitted: a pending URL was leased before (in retry backoff, or
	// handed back), and is admitted already against a page budget.
	readmitted bool
	// nextDue is how long until a pending URL is likely due (its retry, or
	// the end of its host's pause), or an unclaimed lease expires; 0 if
	// none. It is never later than the true time, and can be earlier: a
	// host's pause ending before its URLs' retries wakes the workflow once
	// for nothing.
	nextDue time.Duration
}

// whatIsLeft reads only index entries bounded by leftCountCap, the URLs
// put off (retries, hand-backs) of hosts paused past their retry, and the
// hosts paused now: never the campaign's whole frontier.
func whatIsLeft(ctx context.Context, tx pgx.Tx, campaignKey int64) (leftover, error) {
	var l leftover
	var nextDue *time.Duration
	err := tx.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM (SELECT FROM frontier WHERE campaign = $1 AND state = 'pending' LIMIT $2) p),
			(SELECT count(*) FROM (SELECT FROM frontier WHERE campaign = $1 AND state = 'leased' LIMIT $2) l),
			EXISTS (SELECT FROM frontier WHERE campaign = $1 AND state = 'pending' AND first_leased_at IS NOT NULL),
			(SELECT greatest(min(t) - now(), interval '0') FROM (
				-- Only a URL leased before can be put off: new ones are due
				-- when found. The earliest whose host is not paused past it.
				(SELECT f.next_attempt_at AS t
				 FROM frontier f JOIN hosts h ON h.id = f.host_id LEFT JOIN host_state s ON s.shard_key = h.shard_key
				 WHERE f.campaign = $1 AND f.state = 'pending' AND f.first_leased_at IS NOT NULL AND f.next_attempt_at > now()
				   AND (s.paused_until IS NULL OR s.paused_until <= f.next_attempt_at)
				 ORDER BY f.next_attempt_at LIMIT 1)
				UNION ALL
				-- The first pause to end of a host with URLs waiting.
				(SELECT s.paused_until
				 FROM host_state s JOIN hosts h ON h.shard_key = s.shard_key AND h.campaign = $1
				 WHERE s.paused_until > '-infinity' AND s.paused_until > now()
				   AND EXISTS (SELECT FROM frontier f WHERE f.campaign = $1 AND f.host_id = h.id AND f.state = 'pending')
				 ORDER BY s.paused_until LIMIT 1)
				UNION ALL
				(SELECT lease_expires_at FROM frontier
				 WHERE campaign = $1 AND state = 'leased' AND lease_holder IS NULL
				 ORDER BY lease_expires_at LIMIT 1)
			) t)`, campaignKey, leftCountCap).
		Scan(&l.pending, &l.leased, &l.readmitted, &nextDue)
	if err != nil {
		return l, fmt.Errorf("count what is left: %w", err)
	}
	if nextDue != nil {
		l.nextDue = *nextDue
	}
	return l, nil
}

// ClaimedURL is a leased URL a node now holds.
type ClaimedURL struct {
	ID  int64
	URL string
	// FoundAs is the frontier's found_as: the URL as linked when it
	// differs from URL (or, in rows written before issue 12, as written).
	FoundAs   string
	ShardKey  string
	Depth     int
	Redirects int
	// Attempts are the URL's attempts before this claim.
	Attempts int
	// LeaseAge is how long ago the URL was leased: its time in the
	// workflow and the node's task queue before a node claimed it.
	LeaseAge time.Duration
	// Failed, when set, is why the claim ended the URL failed instead of
	// handing it over: nodes died holding it retry.max_attempts times.
	Failed string
	// Kind is what it is fetched as: KindPage or KindRequisite.
	Kind string
	// Priority orders a batch's URLs, higher first (0 unless added with
	// another).
	Priority int16
}

// liveHolder is true of a frontier row f whose holder still renews: its
// node is alive (see HeartbeatNode).
const liveHolder = `EXISTS (SELECT 1 FROM holders h WHERE h.holder = f.lease_holder AND h.alive_until > now())`

// Claim makes holder the owner of the listed URLs that are still leased
// under leaseID and not held by a live holder, and returns them. Rows
// finished meanwhile, re-leased after their lease expired, or held by a
// node that is still alive are not returned: a batch delivered twice, or
// rerouted while its first node lives, fetches nothing twice. Rows holder
// already holds are returned again; the caller knows which it has.
//
// Taking a URL is an attempt, charged now: a page that kills the node
// fetching it (a crash, the OOM killer) never reaches a commit, and
// charging only there would let it take down node after node forever. The
// commit of a request keeps the charge as the request's attempt; a URL
// handed back, or settled with no request (robots.txt), gets it back. A
// URL already charged retry.max_attempts times is failed here instead,
// with the reason in Failed: every claim of it so far died with its node.
func (s *Store) Claim(ctx context.Context, campaignKey, leaseID int64, ids []int64, holder, node string, ttl time.Duration) ([]ClaimedURL, error) {
	rows, err := s.pool.Query(ctx, `
		WITH spec AS (
			SELECT coalesce((spec->'retry'->>'max_attempts')::int, $7) AS max_attempts FROM campaigns WHERE key = $1
		), c AS (
			SELECT f.id, f.lease_holder IS DISTINCT FROM $4 AS taken,
			       f.lease_holder IS DISTINCT FROM $4 AND f.attempts >= spec.max_attempts AS spent
			FROM frontier f, spec
			WHERE f.campaign = $1 AND f.lease_id = $2 AND f.id = ANY($3) AND f.state = 'leased'
			  AND (f.lease_holder IS NULL OR f.lease_holder = $4 OR NOT `+liveHolder+`)
			ORDER BY f.id
			FOR UPDATE OF f
		)
		UPDATE frontier f SET
			lease_holder = CASE WHEN c.spent THEN NULL ELSE $4 END,
			node = CASE WHEN c.spent THEN f.node ELSE $5 END,
			lease_expires_at = CASE WHEN c.spent THEN NULL ELSE now() + $6::bigint * interval '1 millisecond' END,
			attempts = f.attempts + (c.taken AND NOT c.spent)::int,
			state = CASE WHEN c.spent THEN 'failed' ELSE f.state END,
			last_error = CASE WHEN c.spent THEN format('node lost while fetching (after %s attempts)', f.attempts) ELSE f.last_error END,
			finished_at = CASE WHEN c.spent THEN now() ELSE f.finished_at END
		FROM c
		WHERE f.id = c.id
		RETURNING f.id, f.url, coalesce(f.found_as, ''), f.shard_key, f.depth, f.redirects, f.attempts - (c.taken AND NOT c.spent)::int,
		          (extract(epoch FROM now() - coalesce(f.leased_at, now())) * 1000)::bigint,
		          CASE WHEN c.spent THEN f.last_error ELSE '' END, f.kind, f.priority`,
		campaignKey, leaseID, ids, holder, node, ttl.Milliseconds(), campaign.DefaultMaxAttempts)
	if err != nil {
		return nil, fmt.Errorf("claim lease %d: %w", leaseID, err)
	}
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedURL, error) {
		var (
			c     ClaimedURL
			ageMs int64
		)
		err := r.Scan(&c.ID, &c.URL, &c.FoundAs, &c.ShardKey, &c.Depth, &c.Redirects, &c.Attempts, &ageMs, &c.Failed, &c.Kind, &c.Priority)
		c.LeaseAge = time.Duration(ageMs) * time.Millisecond
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim lease %d: %w", leaseID, err)
	}
	// Fetched in this order: higher priority first, then as found.
	slices.SortFunc(claimed, func(a, b ClaimedURL) int { return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.ID, b.ID)) })
	return claimed, nil
}

func hostKey(campaignKey int64, shard string) string {
	return strconv.FormatInt(campaignKey, 10) + "|" + shard
}

// Release returns to pending, due now, the listed URLs that holder holds,
// under whatever lease (a node handing back what it will not fetch): a
// process has one copy of a URL at a time, and a URL that came back to it
// under a new lease while it was queued (its holder token lapsed, and the
// next lease routed the URL to it again) is still that copy; releasing
// only under the first lease would leave it leased to a live holder that
// no longer means to fetch it, for good. The URLs get back the attempt
// their claim charged. leaseID, the batch's, names it in errors.
func (s *Store) Release(ctx context.Context, campaignKey, leaseID int64, ids []int64, holder string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE frontier f SET state = 'pending', lease_id = NULL, lease_holder = NULL, lease_expires_at = NULL,
			attempts = greatest(f.attempts - 1, 0)
		WHERE f.campaign = $1 AND f.id = ANY($2) AND f.state = 'leased' AND f.lease_holder = $3`,
		campaignKey, ids, holder)
	if err != nil {
		return 0, fmt.Errorf("release lease %d: %w", leaseID, err)
	}
	return int(tag.RowsAffected()), nil
}

// ReleaseUnclaimed returns to pending the URLs of the given leases that no
// node claimed: the batches of a workflow run that continued as new before
// a node picked them up, which now never will be.
func (s *Store) ReleaseUnclaimed(ctx context.Context, campaignKey int64, leaseIDs []int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE frontier SET state = 'pending', lease_id = NULL, lease_expires_at = NULL
		WHERE campaign = $1 AND lease_id = ANY($2) AND state = 'leased' AND lease_holder IS NULL`,
		campaignKey, leaseIDs)
	if err != nil {
		return 0, fmt.Errorf("release unclaimed URLs of %d leases: %w", len(leaseIDs), err)
	}
	return int(tag.RowsAffected()), nil
}

// Outcome is what became of one claimed URL.
type Outcome struct {
	ID    int64
	State string // Fetched, Failed, Excluded, or Pending to retry
	// Attempted is whether a request was made: it keeps the attempt the
	// claim charged (see Claim); without one, the attempt is given back.
	Attempted bool
	Status    int
	Error     string
	// RetryIn delays the next attempt of a URL going back to Pending.
	RetryIn time.Duration
	// Page is the record of a Fetched URL.
	Page *Page
	// Body, on a Fetched URL that processors want, is kept for them with
	// one delivery per processor, in the same transaction as the outcome.
	Body *PageBody
	// Carry, on a URL settled unchanged (304, or not due) in a recurring
	// campaign, copies the items of its last version into this run, in
	// the same transaction as the outcome.
	Carry *Carry
	// Holder and Node, when set, are the holder the URL is recorded for
	// and the node that fetched it, instead of the commit's: a process
	// running many node identities commits them together.
	Holder, Node string
}

// Page is the stored record of a fetched URL's final response.
type Page struct {
	Status        int
	ContentType   string
	ContentLength int64
	Truncated     bool
	Digest        string
	Title         string
	RedirectTo    string
	Links         int
	FetchedAt     time.Time
	Duration      time.Duration
	// Robots are the page's directives (meta robots and X-Robots-Tag).
	Robots crawl.Directives
	// Canonical is the URL the page names canonical, resolved.
	Canonical string
	// Charset is the encoding an HTML page was read in.
	Charset string
	// Rendered, on a page a browser rendered, is its DOM; ContentLength
	// and Digest are then the document's as served (the archive's).
	Rendered *RenderedDOM
}

// RenderedDOM is what a page record keeps of a rendered page's DOM.
type RenderedDOM struct {
	Length int64
	Digest string // sha256:<hex>
}

// CommitResult says what a commit kept.
type CommitResult struct {
	// Accepted are the outcome IDs recorded; the others were no longer held
	// by this holder (the batch was rerouted or its lease expired).
	Accepted   map[int64]bool
	Discovered int
}

// Commit records discovered links, then outcomes and page records. Links
// go first, in a transaction of their own: if the process dies between the
// two, the pages are fetched again (at-least-once) and their links deduped,
// so nothing is lost. One transaction for both would deadlock: a link
// insert waits on the concurrent update of the row with its fingerprint,
// and that update's transaction on another insert. Only URLs holder still
// holds are updated, so a batch that lost its claim cannot overwrite the
// one that took over.
func (s *Store) Commit(ctx context.Context, campaignKey int64, holder, node string, outcomes []Outcome, links []NewURL) (CommitResult, error) {
	discovered, err := s.InsertURLs(ctx, campaignKey, links)
	if err != nil {
		return CommitResult{}, err
	}
	res, err := s.recordOutcomes(ctx, campaignKey, holder, node, outcomes)
	res.Discovered = discovered
	return res, err
}

func (s *Store) recordOutcomes(ctx context.Context, campaignKey int64, holder, node string, outcomes []Outcome) (CommitResult, error) {
	n := len(outcomes)
	ids := make([]int64, n)
	holders := make([]string, n)
	states := make([]string, n)
	tried := make([]int32, n)
	statuses := make([]*int32, n)
	errs := make([]*string, n)
	retryMs := make([]int64, n)
	var (
		pages   pageRows
		bodies  chunkedBodies
		carries carryRows
	)
	for i, o := range outcomes {
		ids[i], states[i], retryMs[i] = o.ID, o.State, o.RetryIn.Milliseconds()
		holders[i] = cmp.Or(o.Holder, holder)
		if o.Attempted {
			tried[i] = 1
		}
		if o.Status != 0 {
			statuses[i] = new(int32(o.Status))
		}
		if o.Error != "" {
			errs[i] = &outcomes[i].Error
		}
		if o.Carry != nil {
			carries.add(o.ID, o.Carry)
		}
		if p := o.Page; p != nil && o.State == Fetched {
			pages.add(o.ID, p, cmp.Or(o.Node, node))
			if o.Body != nil {
				if err := bodies.add(o.ID, o.Body); err != nil {
					return CommitResult{}, fmt.Errorf("page body of %d: %w", o.ID, err)
				}
			}
		}
	}
	args := append([]any{campaignKey, ids, states, tried, statuses, errs, retryMs, holders}, pages.args()...)
	var res CommitResult
	err := s.retry(ctx, func() (err error) {
		if bodies.empty() && carries.empty() { // one statement, so atomic without a transaction round trip
			res.Accepted, err = readAccepted(s.pool.Query(ctx, outcomesSQL+` SELECT id FROM u`, args...))
			return err
		}
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
			if res.Accepted, err = bodies.commit(ctx, tx, args); err != nil {
				return err
			}
			return carries.commit(ctx, tx, campaignKey, res.Accepted)
		})
	})
	if err != nil {
		return CommitResult{}, fmt.Errorf("record %d outcomes for campaign %d: %w", n, campaignKey, err)
	}
	return res, nil
}

// pageRows are the page records of a commit's fetched outcomes, as the
// columns of outcomesSQL ($9-$28).
type pageRows struct {
	ids, length, dur                  []int64
	status, links                     []int32
	ctype, digest, title, redirectTo  []string
	truncated                         []bool
	at                                []time.Time
	noIndex, noFollow, noArchive      []bool
	canonical, charset, fetchedByNode []string
	rendered                          []bool
	renderedLength                    []*int64
	renderedDigest                    []*string
}

// add keeps the record of page id, fetched by node.
func (r *pageRows) add(id int64, p *Page, node string) {
	r.ids = append(r.ids, id)
	r.status = append(r.status, int32(p.Status))
	r.ctype = append(r.ctype, p.ContentType)
	r.length = append(r.length, p.ContentLength)
	r.truncated = append(r.truncated, p.Truncated)
	r.digest = append(r.digest, p.Digest)
	r.title = append(r.title, p.Title)
	r.redirectTo = append(r.redirectTo, p.RedirectTo)
	r.links = append(r.links, int32(p.Links))
	r.at = append(r.at, p.FetchedAt)
	r.dur = append(r.dur, p.Duration.Milliseconds())
	r.noIndex = append(r.noIndex, p.Robots.NoIndex)
	r.noFollow = append(r.noFollow, p.Robots.NoFollow)
	r.noArchive = append(r.noArchive, p.Robots.NoArchive)
	r.canonical = append(r.canonical, p.Canonical)
	r.charset = append(r.charset, p.Charset)
	r.fetchedByNode = append(r.fetchedByNode, node)
	dom := p.Rendered
	r.rendered = append(r.rendered, dom != nil)
	if dom == nil {
		r.renderedLength, r.renderedDigest = append(r.renderedLength, nil), append(r.renderedDigest, nil)
	} else {
		r.renderedLength, r.renderedDigest = append(r.renderedLength, &dom.Length), append(r.renderedDigest, &dom.Digest)
	}
}

// args are the columns, $9 to $28 of outcomesSQL.
func (r *pageRows) args() []any {
	return []any{r.fetchedByNode, r.ids, r.status, r.ctype, r.length, r.truncated, r.digest, r.title, r.redirectTo,
		r.links, r.at, r.dur, r.noIndex, r.noFollow, r.noArchive, r.canonical, r.charset,
		r.rendered, r.renderedLength, r.renderedDigest}
}

// outcomesSQL records a commit's outcomes ($2-$8, each for the row if
// the holder beside it in $8 holds it) and page records ($9-$28, $9 the
// node that fetched each) in CTEs, u being the frontier rows recorded; a
// statement adds its own SELECT from u.
const outcomesSQL = `
			WITH u AS (
				UPDATE frontier f SET
					state = r.state::url_state,
					attempts = greatest(f.attempts + r.tried - 1, 0), -- the claim charged one
					last_status = coalesce(r.status, f.last_status),
					last_error = r.err,
					next_attempt_at = CASE WHEN r.state = 'pending' THEN now() + r.retry_ms * interval '1 millisecond' ELSE f.next_attempt_at END,
					finished_at = CASE WHEN r.state = 'pending' THEN NULL ELSE now() END,
					lease_holder = NULL, lease_expires_at = NULL
				FROM unnest($2::bigint[], $3::text[], $4::int[], $5::int[], $6::text[], $7::bigint[], $8::text[])
				     AS r(id, state, tried, status, err, retry_ms, holder)
				WHERE f.id = r.id AND f.campaign = $1 AND f.lease_holder = r.holder AND f.state = 'leased'
				RETURNING f.id
			), p AS (
				INSERT INTO pages (url_id, campaign, status, content_type, content_length, truncated, content_digest,
				                   title, redirect_to, links, fetched_at, duration_ms, node,
				                   noindex, nofollow, noarchive, canonical, charset,
				                   rendered, rendered_length, rendered_digest)
				SELECT pg.id, $1, pg.status, nullif(pg.ctype, ''), pg.len, pg.trunc, nullif(pg.digest, ''),
				       nullif(pg.title, ''), nullif(pg.redir, ''), pg.links, pg.at, pg.dur, pg.node,
				       pg.noindex, pg.nofollow, pg.noarchive, nullif(pg.canonical, ''), nullif(pg.charset, ''),
				       pg.rendered, pg.rlen, pg.rdigest
				FROM unnest($10::bigint[], $11::int[], $12::text[], $13::bigint[], $14::bool[], $15::text[],
				            $16::text[], $17::text[], $18::int[], $19::timestamptz[], $20::bigint[],
				            $21::bool[], $22::bool[], $23::bool[], $24::text[], $25::text[], $9::text[],
				            $26::bool[], $27::bigint[], $28::text[])
				     AS pg(id, status, ctype, len, trunc, digest, title, redir, links, at, dur,
				           noindex, nofollow, noarchive, canonical, charset, node, rendered, rlen, rdigest)
				JOIN u ON u.id = pg.id
				ON CONFLICT (url_id) DO NOTHING
			)`

// readAccepted reads the ids a commit recorded.
func readAccepted(rows pgx.Rows, err error) (map[int64]bool, error) {
	if err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	accepted := map[int64]bool{}
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { accepted[id] = true; return nil })
	return accepted, err
}
