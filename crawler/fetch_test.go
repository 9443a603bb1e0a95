package crawler_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/crawler"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// completion is how the engine ended a batch.
type completion struct {
	result campaign.BatchResult
	err    error
}

// batchEnds records the batches an engine ends (FetchOptions.Done), by
// the names the tests give them.
type batchEnds struct {
	mu      sync.Mutex
	ids     map[string]int64
	done    map[int64]completion
	arrived chan int64
}

func newBatchEnds() *batchEnds {
	return &batchEnds{ids: map[string]int64{}, done: map[int64]completion{}, arrived: make(chan int64, 100)}
}

// id is the batch number of name.
func (e *batchEnds) id(name string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.ids[name]; !ok {
		e.ids[name] = int64(len(e.ids) + 1)
	}
	return e.ids[name]
}

func (e *batchEnds) ended(d store.DoneBatch) {
	e.mu.Lock()
	e.done[d.Batch] = completion{result: d.Result}
	e.mu.Unlock()
	e.arrived <- d.Batch
}

// accept hands req to the engine as batch name.
func (e *batchEnds) accept(ctx context.Context, f *crawler.Fetch, req campaign.FetchBatchRequest, name string) (campaign.BatchResult, bool, error) {
	req.Batch = e.id(name)
	return f.Accept(ctx, req)
}

// await waits (up to a minute) for batch name to end.
func (e *batchEnds) await(t *testing.T, name string) completion {
	t.Helper()
	id := e.id(name)
	deadline := time.After(time.Minute)
	for {
		e.mu.Lock()
		c, ok := e.done[id]
		e.mu.Unlock()
		if ok {
			return c
		}
		select {
		case <-e.arrived:
		case <-deadline:
			t.Fatalf("batch %s not ended within a minute", name)
		}
	}
}

// startFetch runs a node's engine, registered so its holder token is alive.
func startFetch(t *testing.T, s *store.Store, node string) (*crawler.Fetch, *batchEnds) {
	t.Helper()
	return startFetchLive(t, s, node, nil)
}

// startFetchLive is startFetch with the engine's holder token kept alive as
// live says (nil: always).
func startFetchLive(t *testing.T, s *store.Store, node string, live *crawler.Liveness) (*crawler.Fetch, *batchEnds) {
	t.Helper()
	reg := store.Registration{ID: node, Weight: 1, Incarnation: "1", TTL: time.Hour}
	if err := s.RegisterNode(context.Background(), reg); err != nil {
		t.Fatal(err)
	}
	tmp := newBatchEnds()
	f := crawler.NewFetch(node, s, fetch.New(4, fetch.Guard{AllowPrivate: true}), crawler.FetchOptions{
		Concurrency: 8, Holder: store.HolderToken(node, "1"), Live: live, Done: tmp.ended,
	}, quiet)
	f.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.Stop(ctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
	})
	return f, tmp
}

type row struct {
	state, lastError string
	status           *int
	attempts, depth  int
	redirects        int
}

func frontier(t *testing.T, s *store.Store) map[string]row {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT url, state::text, coalesce(last_error, ''), last_status, attempts, depth, redirects FROM frontier`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]row{}
	for rows.Next() {
		var u string
		var r row
		if err := rows.Scan(&u, &r.state, &r.lastError, &r.status, &r.attempts, &r.depth, &r.redirects); err != nil {
			t.Fatal(err)
		}
		out[u] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFetchBatchOutcomes runs one batch against a small server covering
// each outcome: a page with links in and out of scope, a redirect chain
// past its cap, a 404, and a 503 that earns a retry.
func TestFetchBatchOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>Home</title><a href="/a">a</a><a href="/a#again">dup</a><a href="http://out.of.scope/">x</a><a href="mailto:x@y">m</a>`)
		case "/r1":
			http.Redirect(w, r, "/r2", http.StatusFound)
		case "/gone":
			http.NotFound(w, r)
		case "/busy":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	defer srv.Close()

	s := harness.OpenStore(t)
	ctx := context.Background()
	spec, err := campaign.Spec{
		Seeds:  []string{srv.URL + "/"},
		Limits: campaign.Limits{MaxRedirects: 1},
		Retry:  campaign.Retry{MaxAttempts: 2, InitialInterval: campaign.Duration(time.Minute)},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	control := &activities.Control{Store: s, Log: quiet}
	start, err := control.StartCampaign(ctx, campaign.StartRequest{CampaignID: "c1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	var extra []store.NewURL
	for _, p := range []string{"/r1", "/gone", "/busy"} {
		extra = append(extra, store.NewURL{Fingerprint: crawl.Fingerprint(srv.URL + p), URL: srv.URL + p, ShardKey: srv.Listener.Addr().String()})
	}
	// The chain /r1 -> /r2 arrives here with one redirect already behind it,
	// so its next hop is over the cap of 1.
	extra[0].Redirects = 1
	if _, err := s.InsertURLs(ctx, start.CampaignKey, extra); err != nil {
		t.Fatal(err)
	}
	lease, err := s.LeaseHosts(ctx, store.HostLeaseParams{
		CampaignKey: start.CampaignKey, Nodes: []campaign.LeaseNode{{ID: "n1", Weight: 1, Batches: 1}},
		BatchSize: 10, Horizon: time.Hour, TTL: time.Minute, Concurrency: 10,
	})
	if err != nil || len(lease.Batches) != 1 || len(lease.Batches[0].IDs()) != 4 {
		t.Fatalf("lease %+v %v", lease, err)
	}

	f, tmp := startFetch(t, s, "n1")
	req := campaign.FetchBatchRequest{
		CampaignID: "c1", CampaignKey: start.CampaignKey, LeaseID: lease.LeaseID, Node: "n1", IDs: lease.Batches[0].IDs(),
	}
	if _, pending, err := tmp.accept(ctx, f, req, "t1"); err != nil || !pending {
		t.Fatalf("accept: pending %v, %v", pending, err)
	}
	c := tmp.await(t, "t1")
	if c.err != nil {
		t.Fatal(c.err)
	}
	res := c.result
	if res.Fetched != 2 || res.Failed != 1 || res.Retried != 1 || res.Discovered != 2 {
		t.Fatalf("result %+v: want fetched / and /r1, failed /gone, retried /busy, discovered /a and /r2", res)
	}
	fr := frontier(t, s)
	expect := func(path, state string, check func(row) bool) {
		t.Helper()
		r, ok := fr[srv.URL+path]
		if !ok || r.state != state || (check != nil && !check(r)) {
			t.Errorf("%s: %+v (present %v), want %s", path, r, ok, state)
		}
	}
	expect("/", store.Fetched, nil)
	expect("/a", store.Pending, func(r row) bool { return r.depth == 1 })
	expect("/r1", store.Fetched, nil)
	expect("/r2", store.Excluded, func(r row) bool { return r.redirects == 2 && r.lastError != "" })
	expect("/gone", store.Failed, func(r row) bool { return r.status != nil && *r.status == 404 && r.lastError == "HTTP 404 Not Found" })
	expect("/busy", store.Pending, func(r row) bool { return r.attempts == 1 && r.lastError == "HTTP 503 Service Unavailable" })
	if len(fr) != 6 {
		t.Errorf("frontier has %d rows, want 6 (out-of-scope and non-http links are not added): %v", len(fr), fr)
	}
	var title, redirect string
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT title FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.url = $1),
		(SELECT redirect_to FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.url = $2)`, srv.URL+"/", srv.URL+"/r1").Scan(&title, &redirect); err != nil {
		t.Fatal(err)
	}
	if title != "Home" || redirect != srv.URL+"/r2" {
		t.Errorf("page records: title %q redirect %q", title, redirect)
	}

	// The same batch delivered again: everything is settled, nothing is
	// fetched twice, and there is nothing to wait for.
	again, pending, err := tmp.accept(ctx, f, req, "t2")
	if err != nil || pending || again.Done() != 0 || again.Skipped != 4 {
		t.Fatalf("second delivery %+v pending %v (%v), want all 4 skipped at once", again, pending, err)
	}
}

// politeSite serves pages /0../n-1 and a robots.txt, and logs the arrival
// time of every request.
type politeSite struct {
	*httptest.Server
	mu     sync.Mutex
	times  []time.Time
	robots int
	agents map[string]int
	asked  map[string]int // by user agent and path
}

// agent is how many requests came from user agent a.
func (p *politeSite) agent(a string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agents[a]
}

// twice lists the user agent and path pairs asked more than once.
func (p *politeSite) twice() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for k, n := range p.asked {
		if n > 1 {
			out = append(out, k)
		}
	}
	return out
}

func newPoliteSite(t *testing.T) *politeSite {
	p := &politeSite{agents: map[string]int{}, asked: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.times = append(p.times, time.Now())
		p.agents[r.UserAgent()]++
		p.asked[r.UserAgent()+" "+r.URL.Path]++
		if r.URL.Path == "/robots.txt" {
			p.robots++
		}
		p.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(p.Close)
	return p
}

// served is how many requests the site has answered.
func (p *politeSite) served() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.times)
}

func (p *politeSite) minGap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	gap := time.Hour
	for i := 1; i < len(p.times); i++ {
		gap = min(gap, p.times[i].Sub(p.times[i-1]))
	}
	return gap
}

// leasedBatch starts a campaign over n pages of site and leases them all
// as one batch for node.
func leasedBatch(t *testing.T, s *store.Store, site *politeSite, id, node string, n int, pol campaign.Politeness) campaign.FetchBatchRequest {
	t.Helper()
	ctx := context.Background()
	spec, err := campaign.Spec{Seeds: []string{site.URL + "/0"}, Politeness: pol}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	control := &activities.Control{Store: s, Log: quiet}
	start, err := control.StartCampaign(ctx, campaign.StartRequest{CampaignID: id, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	var more []store.NewURL
	for i := 1; i < n; i++ {
		u := fmt.Sprintf("%s/%d", site.URL, i)
		more = append(more, store.NewURL{Fingerprint: crawl.Fingerprint(u), URL: u, ShardKey: site.Listener.Addr().String()})
	}
	if _, err := s.InsertURLs(ctx, start.CampaignKey, more); err != nil {
		t.Fatal(err)
	}
	lease, err := s.LeaseHosts(ctx, store.HostLeaseParams{
		CampaignKey: start.CampaignKey, Nodes: []campaign.LeaseNode{{ID: node, Weight: 1, Batches: 1}},
		BatchSize: 1000, Horizon: time.Hour, TTL: time.Minute,
	})
	if err != nil || len(lease.Batches) != 1 || lease.Size() != n {
		t.Fatalf("lease %+v (%v), want one batch of %d", lease, err, n)
	}
	return campaign.FetchBatchRequest{
		CampaignID: id, CampaignKey: start.CampaignKey, LeaseID: lease.LeaseID, Node: node, IDs: lease.Batches[0].IDs(),
	}
}

func states(t *testing.T, s *store.Store, key int64) map[string]int {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT state::text, count(*) FROM frontier WHERE campaign = $1 GROUP BY 1`, key)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStoppedCampaignHandsBackWhatWaits: a batch of a campaign that stops
// running (cancelled, say) hands its queued URLs back to pending and ends
// with what it did.
func TestStoppedCampaignHandsBackWhatWaits(t *testing.T) {
	s := harness.OpenStore(t)
	site := newPoliteSite(t)
	req := leasedBatch(t, s, site, "cancel", "n1", 6, campaign.Politeness{MinDelay: campaign.Duration(time.Second), IgnoreRobots: true})
	f, tmp := startFetch(t, s, "n1")
	if _, pending, err := tmp.accept(context.Background(), f, req, "t"); err != nil || !pending {
		t.Fatalf("accept: %v %v", pending, err)
	}
	f.StopCampaign(req.CampaignKey)
	did := tmp.await(t, "t").result
	if did.Released == 0 || did.Fetched+did.Released != 6 {
		t.Fatalf("stopped batch says %+v, want the unfetched URLs released", did)
	}
	if st := states(t, s, req.CampaignKey); st[store.Leased] != 0 || st[store.Pending] != did.Released {
		t.Fatalf("frontier %v after the stop, want %d pending and none leased", st, did.Released)
	}
}

// TestHandBackBoundsABatch: a batch whose host is slower than its lease
// expected hands back what has not started at its hand-back time.
func TestHandBackBoundsABatch(t *testing.T) {
	s := harness.OpenStore(t)
	site := newPoliteSite(t)
	req := leasedBatch(t, s, site, "handback", "n1", 5, campaign.Politeness{MinDelay: campaign.Duration(2 * time.Second), IgnoreRobots: true})
	req.HandBackAfter = campaign.Duration(500 * time.Millisecond)
	f, tmp := startFetch(t, s, "n1")
	begun := time.Now()
	if _, _, err := tmp.accept(context.Background(), f, req, "t"); err != nil {
		t.Fatal(err)
	}
	c := tmp.await(t, "t")
	if c.err != nil || c.result.Fetched == 0 || c.result.Released == 0 || c.result.Fetched+c.result.Released != 5 {
		t.Fatalf("batch ended %+v (%v), want some fetched and the rest handed back", c.result, c.err)
	}
	if took := time.Since(begun); took > 5*time.Second {
		t.Fatalf("the batch took %v; 5 URLs 2s apart would take 8s", took)
	}
}

// TestStopHandsBackAndCompletes: a node stopping hands back what it has
// not started and completes its batches.
func TestStopHandsBackAndCompletes(t *testing.T) {
	s := harness.OpenStore(t)
	site := newPoliteSite(t)
	req := leasedBatch(t, s, site, "stop", "n1", 5, campaign.Politeness{MinDelay: campaign.Duration(time.Second), IgnoreRobots: true})
	f, tmp := startFetch(t, s, "n1")
	if _, _, err := tmp.accept(context.Background(), f, req, "t"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := tmp.await(t, "t")
	if c.err != nil || c.result.Released == 0 || c.result.Fetched+c.result.Released != 5 {
		t.Fatalf("stopped batch %+v (%v), want the rest released", c.result, c.err)
	}
	if st := states(t, s, req.CampaignKey); st[store.Leased] != 0 {
		t.Fatalf("frontier %v after stop, want nothing leased", st)
	}
}

// TestTwoCampaignsShareTheHostsPace: two campaigns on one host, one asking
// 300ms between requests and one 600ms: every request to the host is at
// least 600ms after the one before, and robots.txt is fetched once.
func TestTwoCampaignsShareTheHostsPace(t *testing.T) {
	s := harness.OpenStore(t)
	site := newPoliteSite(t)
	fast := leasedBatch(t, s, site, "fast", "n1", 4, campaign.Politeness{MinDelay: campaign.Duration(300 * time.Millisecond), UserAgent: "fast/1"})
	slow := leasedBatch(t, s, site, "slow", "n1", 4, campaign.Politeness{MinDelay: campaign.Duration(600 * time.Millisecond), UserAgent: "slow/1"})
	f, tmp := startFetch(t, s, "n1")
	for _, r := range []struct {
		req   campaign.FetchBatchRequest
		token string
	}{{fast, "fast"}, {slow, "slow"}} {
		if _, _, err := tmp.accept(context.Background(), f, r.req, r.token); err != nil {
			t.Fatal(err)
		}
	}
	for _, token := range []string{"fast", "slow"} {
		if c := tmp.await(t, token); c.err != nil || c.result.Fetched != 4 {
			t.Fatalf("%s: %+v %v", token, c.result, c.err)
		}
	}
	if gap := site.minGap(); gap < 600*time.Millisecond {
		t.Fatalf("two requests came %v apart; the stricter campaign asks 600ms", gap)
	}
	site.mu.Lock()
	defer site.mu.Unlock()
	if site.robots != 1 || site.agents["fast/1"] == 0 || site.agents["slow/1"] == 0 {
		t.Fatalf("robots.txt fetched %d times (agents %v), want once for both campaigns", site.robots, site.agents)
	}
}

// TestHostsLastURLIsCommittedSoon: a URL that leaves its host with nothing
// queued on the engine is committed without waiting for others (the
// host's next URLs, its links among them, wait for that commit), here
// with pending settlements otherwise held an hour.
func TestHostsLastURLIsCommittedSoon(t *testing.T) {
	crawler.SetFlushAfter(t, time.Hour)
	s := openStoreAt(t, harness.NewDatabase(t))
	site := newPoliteSite(t)
	req := leasedBatch(t, s, site, "soon", "n1", 3, campaign.Politeness{IgnoreRobots: true, UserAgent: "soon/1"})
	f, ends := startFetch(t, s, "n1")
	if _, pending, err := ends.accept(context.Background(), f, req, "soon"); err != nil || !pending {
		t.Fatalf("accept: pending %v, %v", pending, err)
	}
	if c := ends.await(t, "soon"); c.result.Fetched != 3 {
		t.Fatalf("batch ended with %+v, want 3 fetched", c.result)
	}
	for u, r := range frontier(t, s) {
		if r.state != "fetched" {
			t.Errorf("%s %s, want fetched", u, r.state)
		}
	}
}
