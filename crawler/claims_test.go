package crawler_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestLapsedClaimStopsTheHost: a node cut off from Postgres (a proxy the
// test holds) for longer than its host claims live stops fetching their
// hosts before the claims lapse, so the node that takes a host over is
// alone on it: the web sees no two requests closer than the host's delay,
// and no page asked twice.
func TestLapsedClaimStopsTheHost(t *testing.T) {
	dbURL := harness.NewDatabase(t)
	direct := openStoreAt(t, dbURL)
	proxy := startPGProxy(t, dbURL)
	cutOff := openStoreAt(t, proxy.url)
	site := newPoliteSite(t)
	pol := func(agent string) campaign.Politeness {
		return campaign.Politeness{MinDelay: campaign.Duration(time.Second), IgnoreRobots: true, UserAgent: agent}
	}
	a := leasedBatch(t, direct, site, "lapse-a", "n1", 40, pol("a/1"))
	b := leasedBatch(t, direct, site, "lapse-b", "n2", 40, pol("b/1"))

	f1, ends1 := startFetch(t, cutOff, "n1")
	if _, _, err := ends1.accept(context.Background(), f1, a, "a"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "n1 fetching the host", func() bool { return site.agent("a/1") >= 2 })
	f2, ends2 := startFetch(t, direct, "n2")
	if _, _, err := ends2.accept(context.Background(), f2, b, "b"); err != nil {
		t.Fatal(err)
	}
	proxy.hold(true)
	// n1's claim lapses 10 s after its last renewal; n2 takes the host then.
	harness.Eventually(t, time.Minute, "n2 fetching the host", func() bool { return site.agent("b/1") >= 4 })
	proxy.hold(false)
	if gap := site.minGap(); gap < time.Second {
		t.Errorf("two requests %v apart at the web, under the host's 1s delay: the cut-off node went on fetching", gap)
	}
	if twice := site.twice(); len(twice) > 0 {
		t.Errorf("asked twice: %v", twice)
	}
}

// TestBatchClaimsItsHostsInOneStatement: a node taking a batch over hosts
// it does not hold yet claims them all in one statement, each with its
// policy, rather than a claim and a policy read a host at its first turn:
// on a pool of many nodes every batch brings hosts new to its node, and
// each round trip waits behind the whole pool's.
func TestBatchClaimsItsHostsInOneStatement(t *testing.T) {
	const hosts = 6
	dbURL := harness.NewDatabase(t)
	direct := openStoreAt(t, dbURL)
	proxy := startPGProxy(t, dbURL)
	counted := openStoreAt(t, proxy.url+"&default_query_exec_mode=exec")
	var sites []*politeSite
	var seeds []string
	for range hosts {
		site := newPoliteSite(t)
		sites = append(sites, site)
		seeds = append(seeds, site.URL+"/0")
	}
	ctx := context.Background()
	spec, err := campaign.Spec{Seeds: seeds, Politeness: campaign.Politeness{MinDelay: campaign.Duration(time.Second), IgnoreRobots: true}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	start, err := (&activities.Control{Store: direct, Log: quiet}).StartCampaign(ctx, campaign.StartRequest{CampaignID: "claims", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := direct.LeaseHosts(ctx, store.HostLeaseParams{
		CampaignKey: start.CampaignKey, Nodes: []campaign.LeaseNode{{ID: "n1", Weight: 1, Batches: 1}},
		BatchSize: 1000, Horizon: time.Hour, TTL: time.Minute,
	})
	if err != nil || len(lease.Batches) != 1 || lease.Size() != hosts {
		t.Fatalf("lease %+v (%v), want one batch of %d", lease, err, hosts)
	}
	f, ends := startFetch(t, counted, "n1")
	req := campaign.FetchBatchRequest{CampaignID: "claims", CampaignKey: start.CampaignKey, LeaseID: lease.LeaseID, Node: "n1", IDs: lease.Batches[0].IDs()}
	if _, _, err := ends.accept(ctx, f, req, "all"); err != nil {
		t.Fatal(err)
	}
	if c := ends.await(t, "all"); c.err != nil || c.result.Fetched != hosts {
		t.Fatalf("batch ended %+v, want %d fetched", c, hosts)
	}
	for i, site := range sites {
		if n := site.served(); n != 1 {
			t.Errorf("host %d served %d requests, want 1", i, n)
		}
	}
	if n := proxy.statements("INSERT INTO host_state AS s (shard_key, claim_holder"); n != 1 {
		t.Errorf("%d statements claimed the batch's %d hosts, want 1", n, hosts)
	}
}

// openStoreAt opens a store at url (the database migrated already, or
// migrated now), closed at the end of the test.
func openStoreAt(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url, 8, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// pgProxy forwards connections to Postgres, and while held forwards
// nothing either way: the node behind it is cut off, its connections open.
// It keeps the text of every statement its clients send (see statements).
type pgProxy struct {
	url  string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
	sent []string // statements sent, in the order Postgres got them
}

// statements counts the statements sent whose text contains part. Every
// statement is counted through a URL with default_query_exec_mode=exec,
// which parses each anew; with the default cache, only the first of each.
func (p *pgProxy) statements(part string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.sent {
		if strings.Contains(q, part) {
			n++
		}
	}
	return n
}

func startPGProxy(t *testing.T, dbURL string) *pgProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = l.Addr().String()
	p := &pgProxy{url: u.String()}
	p.cond = sync.NewCond(&p.mu)
	var conns []net.Conn
	var connsMu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, up)
			connsMu.Unlock()
			go p.pipe(up, c, &pgReader{sent: func(q string) { p.mu.Lock(); p.sent = append(p.sent, q); p.mu.Unlock() }})
			go p.pipe(c, up, nil)
		}
	}()
	t.Cleanup(func() {
		p.hold(false)
		l.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

func (p *pgProxy) hold(h bool) {
	p.mu.Lock()
	p.held = h
	p.mu.Unlock()
	p.cond.Broadcast()
}

// pipe copies src to dst, each chunk only once the proxy is not held,
// showing it to read (a client's messages) if not nil.
func (p *pgProxy) pipe(dst io.Writer, src io.Reader, read *pgReader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if read != nil {
				read.write(buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pgReader reads a client's side of the Postgres protocol and hands the
// text of each statement it parses (Parse) or sends whole (Query) to sent.
type pgReader struct {
	sent    func(string)
	buf     []byte
	started bool // past the start-up messages, which have no type byte
}

func (r *pgReader) write(b []byte) {
	r.buf = append(r.buf, b...)
	for {
		if !r.started {
			if len(r.buf) < 8 {
				return
			}
			n := int(binary.BigEndian.Uint32(r.buf))
			if len(r.buf) < n {
				return
			}
			// SSLRequest and GSSENCRequest come before the start-up message.
			code := binary.BigEndian.Uint32(r.buf[4:])
			r.started = code != 80877103 && code != 80877104
			r.buf = r.buf[n:]
			continue
		}
		if len(r.buf) < 5 {
			return
		}
		n := 1 + int(binary.BigEndian.Uint32(r.buf[1:]))
		if len(r.buf) < n {
			return
		}
		body := r.buf[5:n]
		switch r.buf[0] {
		case 'P': // statement name, then its text
			if _, rest, ok := bytes.Cut(body, []byte{0}); ok {
				q, _, _ := bytes.Cut(rest, []byte{0})
				r.sent(string(q))
			}
		case 'Q':
			q, _, _ := bytes.Cut(body, []byte{0})
			r.sent(string(q))
		}
		r.buf = r.buf[n:]
	}
}
