package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

type frontierRow struct {
	state, lastError string
	status           int
	attempts         int
}

func frontierByURL(t *testing.T, s *harness.Stack) map[string]frontierRow {
	t.Helper()
	return frontierRows(t, s, `SELECT url, state::text, coalesce(last_error, ''), coalesce(last_status, 0), attempts FROM frontier`)
}

// frontierRows reads query's rows (url, state, last_error, last_status,
// attempts) by URL.
func frontierRows(t *testing.T, s *harness.Stack, query string, args ...any) map[string]frontierRow {
	t.Helper()
	rows, err := s.Store.Pool().Query(bg, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]frontierRow{}
	for rows.Next() {
		var u string
		var r frontierRow
		if err := rows.Scan(&u, &r.state, &r.lastError, &r.status, &r.attempts); err != nil {
			t.Fatal(err)
		}
		out[u] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("frontier rows: %v", err)
	}
	return out
}

var (
	bombOnce sync.Once
	bomb     []byte
)

// gzipBomb is 256 MiB of zeros, gzipped to about 250 KiB.
func gzipBomb() []byte {
	bombOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zeros := make([]byte, 1<<20)
		for range 256 {
			zw.Write(zeros)
		}
		zw.Close()
		bomb = b.Bytes()
	})
	return bomb
}

func traps() map[string]http.HandlerFunc {
	html := func(w http.ResponseWriter) { w.Header().Set("Content-Type", "text/html") }
	return map[string]http.HandlerFunc{
		"/calendar": func(w http.ResponseWriter, r *http.Request) { // an endless calendar
			m, _ := strconv.Atoi(r.URL.Query().Get("m"))
			html(w)
			fmt.Fprintf(w, `<a href="/calendar?m=%d">next</a> <a href="/calendar?m=%d">prev</a>`, m+1, m-1)
		},
		"/loop/a": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/b", http.StatusFound) },
		"/loop/b": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/a", http.StatusFound) },
		"/chain/": func(w http.ResponseWriter, r *http.Request) { // an endless redirect chain
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/"))
			http.Redirect(w, r, fmt.Sprintf("/chain/%d", n+1), http.StatusFound)
		},
		"/big": func(w http.ResponseWriter, r *http.Request) { // 50 MB of HTML
			html(w)
			chunk := bytes.Repeat([]byte("<p>big</p>"), 10_000)
			for sent := 0; sent < 50<<20 && r.Context().Err() == nil; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
		"/bomb": func(w http.ResponseWriter, r *http.Request) {
			html(w)
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipBomb())
		},
		"/slow": func(w http.ResponseWriter, r *http.Request) { // a body that stops coming
			html(w)
			w.Write([]byte("<html><body>"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
		"/many": func(w http.ResponseWriter, r *http.Request) { // 10,000 links
			html(w)
			for i := range 10_000 {
				fmt.Fprintf(w, `<a href="/many/%d">%d</a>`, i, i)
			}
		},
		"/many/": func(w http.ResponseWriter, r *http.Request) { html(w); fmt.Fprint(w, "leaf") },
		"/rep/": func(w http.ResponseWriter, r *http.Request) { // a relative link that nests forever
			html(w)
			fmt.Fprint(w, `<a href="x/">deeper</a>`)
		},
		"/utf8": func(w http.ResponseWriter, r *http.Request) { // broken HTML, invalid UTF-8
			html(w)
			w.Write([]byte("<title>\xff\xfe\x00bad</title><a href='/p/1.html'<<a href=\"/p/2.html\">x<div><div>"))
		},
	}
}

// TestTrapsEndWithReasons: a web of traps is crawled to the end, each trap
// ending failed or excluded with its reason, while the node processes stay
// small.
func TestTrapsEndWithReasons(t *testing.T) {
	links := []string{"/calendar?m=0", "/loop/a", "/chain/1", "/big", "/bomb", "/slow", "/many", "/rep/x/", "/utf8"}
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 2, Pages: 20, LinksPerPage: 2, CrossHostFraction: 0.5, Seed: 9,
		Custom: map[int]map[string]http.HandlerFunc{0: traps()}, ExtraLinks: map[int][]string{0: links},
	})
	s := harness.NewStack(t)
	nodes := []*harness.NodeProcess{s.StartNodeProcess("a", 1), s.StartNodeProcess("b", 1)}
	spec := loopbackSpec(web)
	spec.Limits.MaxQueryURLsPerHost = 5
	spec.Timeouts.Idle = campaign.Duration(time.Second)
	spec.Retry = campaign.Retry{MaxAttempts: 2, InitialInterval: campaign.Duration(100 * time.Millisecond)}
	sum := harness.RunCampaign(t, s, "traps-"+s.Name, spec, 4*time.Minute)
	if sum.Pending != 0 || sum.Leased != 0 {
		t.Fatalf("campaign left work: %+v", sum)
	}
	base := "http://" + web.Hosts()[0]
	fr := frontierByURL(t, s)
	want := func(path, state, reason string) {
		t.Helper()
		r, ok := fr[base+path]
		if !ok || r.state != state || !strings.Contains(r.lastError, reason) {
			t.Errorf("%s: %+v (present %v); want %s with %q", path, r, ok, state, reason)
			return
		}
		t.Logf("%-14s %-8s %s", path, r.state, r.lastError)
	}
	want("/big", "failed", "body larger than limits.max_body_bytes")
	want("/bomb", "failed", "body larger than limits.max_body_bytes")
	want("/slow", "failed", "body stalled")
	want("/many", "fetched", "kept the first 1000 links")
	want("/chain/7", "excluded", "redirect chain longer than limits.max_redirects (5)")
	want("/rep/x/x/x/x/", "excluded", "path segment repeats")
	want("/utf8", "fetched", "")
	if r := fr[base+"/loop/a"]; r.state != "fetched" || fr[base+"/loop/b"].state != "fetched" {
		t.Errorf("redirect loop: %+v %+v; want both answered (302) and the loop ended by dedup", r, fr[base+"/loop/b"])
	}
	calFetched, calCapped := 0, 0
	for u, r := range fr {
		if !strings.HasPrefix(u, base+"/calendar?") {
			continue
		}
		switch {
		case r.state == "fetched":
			calFetched++
		case r.state == "excluded" && strings.Contains(r.lastError, "max_query_urls_per_host"):
			calCapped++
		default:
			t.Errorf("calendar URL %s ended %+v", u, r)
		}
	}
	t.Logf("calendar: %d fetched, %d excluded at the query cap", calFetched, calCapped)
	if calFetched > 5 || calCapped == 0 {
		t.Errorf("calendar: %d fetched (cap 5), %d excluded", calFetched, calCapped)
	}
	for _, n := range nodes {
		rss, err := n.PeakRSS()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s peak RSS %.1f MiB", n.ID, float64(rss)/(1<<20))
		if rss > 300<<20 {
			t.Errorf("node %s peak RSS %d MiB, over 300", n.ID, rss>>20)
		}
	}
}

// acceptCounter counts connections that reach a listener.
type acceptCounter struct {
	l        net.Listener
	accepted atomic.Int64
}

func listenCounting(t *testing.T, network, addr string) *acceptCounter {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil
	}
	c := &acceptCounter{l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return c
}

// TestPrivateAddressesRefused: with the default setting, a seed or a
// redirect to loopback, private or link-local addresses is refused before
// any connection is made.
func TestPrivateAddressesRefused(t *testing.T) {
	v4 := listenCounting(t, "tcp4", "127.0.0.1:0")
	v6 := listenCounting(t, "tcp6", "[::1]:0")
	// A "public" server the test allows explicitly, which redirects inward.
	pub, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		// Linux answers on all of 127.0.0.0/8; a skip here would pass
		// the suite with the guard untested end to end.
		t.Fatalf("cannot listen on 127.0.0.2, the allowed \"public\" server: %v", err)
	}
	target := "http://" + v4.l.Addr().String() + "/via-redirect"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, target, http.StatusFound)
	})}
	go srv.Serve(pub)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})

	s := harness.NewStack(t)
	s.StartNodeWith("guarded", 1, func(c *config.Config) {
		c.Node.AllowPrivateNetworks = false // the default
		c.Node.AllowNetworks = []string{"127.0.0.2/32"}
	})
	seeds := []string{"http://" + v4.l.Addr().String() + "/", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
		"http://" + pub.Addr().String() + "/"}
	if v6 != nil {
		seeds = append(seeds, "http://"+v6.l.Addr().String()+"/")
	}
	spec := campaign.Spec{Seeds: seeds, Retry: campaign.Retry{MaxAttempts: 1}}
	sum := harness.RunCampaign(t, s, "ssrf-"+s.Name, spec, 2*time.Minute)
	fr := frontierByURL(t, s)
	refused := append(append([]string{}, seeds[:3]...), seeds[4:]...)
	for _, u := range refused {
		r := fr[u]
		if r.state != "failed" || !strings.Contains(r.lastError, "refused to connect") {
			t.Errorf("%s: %+v, want failed as refused", u, r)
		}
		t.Logf("%-45s %s", u, r.lastError)
	}
	if r := fr[seeds[3]]; r.state != "fetched" {
		t.Errorf("the allowed server's page: %+v", r)
	}
	if r := fr[target]; r.state != "failed" || !strings.Contains(r.lastError, "loopback") {
		t.Errorf("redirect target %s: %+v, want refused", target, r)
	}
	if n := v4.accepted.Load(); n != 0 {
		t.Errorf("the 127.0.0.1 listener accepted %d connections", n)
	}
	if v6 != nil && v6.accepted.Load() != 0 {
		t.Errorf("the [::1] listener accepted %d connections", v6.accepted.Load())
	}
	t.Logf("summary: %d fetched, %d failed; loopback listeners accepted %d connections", sum.Fetched, sum.Failed, v4.accepted.Load())
}

// TestRetriesClearTransientErrorsAndRetryFailedRequeues: 503s that clear
// after two attempts end fetched, a 404 ends failed after one attempt, and
// `spiderpool campaign retry-failed` re-queues them so the next run fetches
// what now works.
func TestRetriesClearTransientErrorsAndRetryFailedRequeues(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 3, Pages: 90, LinksPerPage: 3, CrossHostFraction: 0.4, Seed: 13,
		TransientFraction: 0.08, TransientAttempts: 2, DeadLinkFraction: 0.15,
	})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	spec := loopbackSpec(web)
	spec.Retry = campaign.Retry{MaxAttempts: 3, InitialInterval: campaign.Duration(50 * time.Millisecond)}
	id := "retries-" + s.Name
	sum := harness.RunCampaign(t, s, id, spec, 2*time.Minute)
	assertExactlyOnce(t, s, web, sum) // each transient page: two 503s, then 200
	fr := frontierByURL(t, s)
	transient := 0
	for _, p := range web.Pages() {
		if web.ExpectedHits(p) == 3 {
			transient++
			if r := fr[p]; r.state != "fetched" || r.attempts != 3 {
				t.Errorf("transient page %s: %+v, want fetched on attempt 3", p, r)
			}
		}
	}
	dead := web.DeadLinks()
	for _, d := range dead {
		if r := fr[d]; r.state != "failed" || r.attempts != 1 || r.status != 404 {
			t.Errorf("dead link %s: %+v, want failed after 1 attempt with 404", d, r)
		}
	}
	if transient == 0 || len(dead) == 0 {
		t.Fatalf("%d transient pages and %d dead links: the web proves nothing", transient, len(dead))
	}

	web.Revive()
	r := runCmd(t, "", harness.Binary(t), "campaign", "retry-failed", id, "--temporal-address", s.Config.TemporalAddress,
		"--database-url", s.Config.DatabaseURL, "--control-queue", s.Config.ControlQueue)
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("re-queued %d failed URL(s); the campaign is running again", len(dead))) {
		t.Fatalf("retry-failed: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	again := harness.CampaignResult(t, s, id, 2*time.Minute)
	hits := web.Hits()
	for _, d := range dead {
		if hits[d] != 2 {
			t.Errorf("revived %s requested %d times, want twice (404, then 200)", d, hits[d])
		}
	}
	if again.Failed != 0 || again.Fetched != int64(len(web.Pages())+len(dead)) {
		t.Fatalf("after retry-failed: %+v; want all %d pages and %d revived links fetched", again, len(web.Pages()), len(dead))
	}
	t.Logf("first run: %d fetched, %d failed (%d transient pages fetched on attempt 3) in %.1fs; after retry-failed: %d fetched, 0 failed, %.1fs in all",
		sum.Fetched, sum.Failed, transient, sum.Seconds, again.Fetched, again.Seconds)
}
