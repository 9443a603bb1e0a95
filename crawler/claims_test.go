package crawler_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

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
type pgProxy struct {
	url  string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
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
			go p.pipe(up, c)
			go p.pipe(c, up)
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

// pipe copies src to dst, each chunk only once the proxy is not held.
func (p *pgProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
