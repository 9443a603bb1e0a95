// Package synthweb serves a deterministic synthetic web on loopback: many
// hosts (one listener each on 127.0.0.1), a fixed link graph in which every
// page is reachable from the first host's root, configurable latency and
// failures, and an access log that counts every request, by User-Agent too.
// The log is the ground truth for "every page fetched exactly once", also
// when several crawls with different user agents share one web.
package synthweb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config shapes a synthetic web. The link graph depends only on Seed,
// Hosts, Pages and LinksPerPage; ports differ from run to run.
type Config struct {
	Hosts        int   // number of hosts, each its own 127.0.0.1 port
	Pages        int   // pages in all, spread evenly over the hosts
	LinksPerPage int   // extra links per page beyond the tree that makes all reachable
	Seed         int64 // picks the extra links and which pages fail
	// CrossHostFraction of the extra links go to other hosts.
	CrossHostFraction float64
	// Latency delays every response.
	Latency time.Duration
	// HostLatency delays host h's responses by this instead of Latency
	// (zero included): a few slow hosts among fast ones.
	HostLatency map[int]time.Duration
	// TransientFraction of pages answer 503 to their first
	// TransientAttempts requests, then 200.
	TransientFraction float64
	TransientAttempts int
	// DeadLinkFraction of pages also link to a page that answers 404.
	DeadLinkFraction float64
	// PageBytes pads each page body to about this size.
	PageBytes int
	// Custom serves these paths of host h instead of generated pages
	// ("/robots.txt", traps, ...). A path ending in "/" matches by prefix.
	Custom map[int]map[string]http.HandlerFunc
	// ExtraLinks are added to the root page of host h.
	ExtraLinks map[int][]string
	// Intercept sees every request to host h first; returning true means it
	// answered (a 429, say) and the normal page is not served.
	Intercept map[int]func(http.ResponseWriter, *http.Request) bool
	// CountOnly keeps only per-URL (and per-agent) request counts, not
	// every request's time and status: for benchmarks of a million pages.
	CountOnly bool
	// PlainLinks writes links without fragments or upper-case schemes
	// (relative and absolute forms still): for crawlers that would count
	// "/p#a" and "/p#b" as two pages.
	PlainLinks bool
}

// Request is one entry of the access log.
type Request struct {
	At     time.Time
	Path   string // with ?query when there is one
	Status int
	Agent  string // the User-Agent header
}

// Web is a running synthetic web.
type Web struct {
	cfg     Config
	hosts   []string // host:port, index = host number
	servers []*http.Server
	perHost []int // pages on each host

	mu       sync.Mutex
	hits     map[hit]int            // (agent, "host:port/path") -> requests
	agents   map[string]string      // interned User-Agent values, so hits holds one copy each
	times    map[string][]time.Time // host:port -> request arrival times
	log      map[string][]Request   // host:port -> requests in order
	failures map[string]int         // transient failures served per page
	revived  bool                   // dead links answer 200 now
}

// hit keys the request counts: which URL, asked for by which agent.
type hit struct {
	agent string
	url   string // host:port/path
}

// Start serves cfg on loopback.
func Start(cfg Config) (*Web, error) {
	if cfg.Hosts < 1 || cfg.Pages < cfg.Hosts {
		return nil, fmt.Errorf("synthweb: need at least one page per host, got %d pages over %d hosts", cfg.Pages, cfg.Hosts)
	}
	w := &Web{cfg: cfg, hits: map[hit]int{}, agents: map[string]string{}, times: map[string][]time.Time{}, log: map[string][]Request{}, failures: map[string]int{}}
	for h := range cfg.Hosts {
		w.perHost = append(w.perHost, cfg.Pages/cfg.Hosts+boolInt(h < cfg.Pages%cfg.Hosts))
	}
	for h := range cfg.Hosts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("synthweb: listen: %w", err)
		}
		w.hosts = append(w.hosts, l.Addr().String())
		srv := &http.Server{Handler: w.handler(h), ReadHeaderTimeout: 10 * time.Second}
		w.servers = append(w.servers, srv)
		go srv.Serve(l) //nolint:errcheck // ends with Close
	}
	return w, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Close stops every host.
func (w *Web) Close() {
	for _, s := range w.servers {
		_ = s.Shutdown(context.Background())
	}
}

// Hosts returns host:port of every host.
func (w *Web) Hosts() []string { return slices.Clone(w.hosts) }

// Seed is the root of host 0, from which every page is reachable.
func (w *Web) Seed() string { return "http://" + w.hosts[0] + "/" }

// Roots lists every host's root URL. Each host's pages are a tree from its
// own root, so seeding all of them starts a crawl on every host at once.
func (w *Web) Roots() []string {
	out := make([]string, len(w.hosts))
	for h, host := range w.hosts {
		out[h] = "http://" + host + "/"
	}
	return out
}

// URL is the canonical URL of page i on host h.
func (w *Web) URL(h, i int) string { return "http://" + w.hosts[h] + pagePath(i) }

func pagePath(i int) string {
	if i == 0 {
		return "/"
	}
	return "/p/" + strconv.Itoa(i) + ".html"
}

// Pages lists every page URL: the set a complete crawl fetches.
func (w *Web) Pages() []string {
	var out []string
	for h, n := range w.perHost {
		for i := range n {
			out = append(out, w.URL(h, i))
		}
	}
	return out
}

// ExpectedHits is how many requests a crawl that fetches url exactly once
// makes: one, plus the 503s a transient page answers first.
func (w *Web) ExpectedHits(url string) int {
	for h, host := range w.hosts {
		if rest, ok := strings.CutPrefix(url, "http://"+host); ok {
			if i, err := pageIndex(rest); err == nil && i < w.perHost[h] && w.isTransient(h, i) {
				return 1 + w.cfg.TransientAttempts
			}
			return 1
		}
	}
	return 1
}

// DeadLinks lists the URLs pages link to that answer 404.
func (w *Web) DeadLinks() []string {
	var out []string
	for h, n := range w.perHost {
		for i := range n {
			if w.hasDeadLink(h, i) {
				out = append(out, "http://"+w.hosts[h]+deadPath(i))
			}
		}
	}
	return out
}

func deadPath(i int) string { return "/missing/" + strconv.Itoa(i) + ".html" }

// Hits returns how many requests each URL got (as http://host:port/path).
func (w *Web) Hits() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.hits))
	for k, v := range w.hits {
		out["http://"+k.url] += v
	}
	return out
}

// HitsBy is Hits counting only requests whose User-Agent was agent.
func (w *Web) HitsBy(agent string) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.hits {
		if k.agent == agent {
			out["http://"+k.url] += v
		}
	}
	return out
}

// Requests is the total number of requests served.
func (w *Web) Requests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.hits {
		n += v
	}
	return n
}

// Times returns the arrival times of requests to host (host:port).
func (w *Web) Times(host string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.times[host])
}

// Log returns host's requests in arrival order, with the status served.
func (w *Web) Log(host string) []Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log[host])
}

// Reset forgets every request served, for the next crawl of the same web.
func (w *Web) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hits, w.times, w.log, w.failures = map[hit]int{}, map[string][]time.Time{}, map[string][]Request{}, map[string]int{}
}

// Tally compares the requests served with the web: pages never requested,
// and pages requested more often than a crawl fetching each once would.
func (w *Web) Tally() (missing, duplicates int) { return w.tally(w.Hits()) }

// TallyAgent is Tally over the requests of one User-Agent: for crawls that
// share a web, each checked for every page fetched exactly once.
func (w *Web) TallyAgent(agent string) (missing, duplicates int) { return w.tally(w.HitsBy(agent)) }

func (w *Web) tally(hits map[string]int) (missing, duplicates int) {
	for _, p := range w.Pages() {
		switch n := hits[p]; {
		case n == 0:
			missing++
		case n > w.ExpectedHits(p):
			duplicates++
		}
	}
	return missing, duplicates
}

// Revive makes the dead links answer 200 from now on, like a site that
// fixed its broken pages.
func (w *Web) Revive() {
	w.mu.Lock()
	w.revived = true
	w.mu.Unlock()
}

// roll is a deterministic uniform [0,1) draw for (purpose, host, page).
// FNV alone clusters on keys this alike, so its output is mixed further.
func (w *Web) roll(purpose string, h, i int) float64 {
	f := fnv.New64a()
	fmt.Fprintf(f, "%d/%s/%d/%d", w.cfg.Seed, purpose, h, i)
	z := f.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

func (w *Web) isTransient(h, i int) bool {
	return w.cfg.TransientFraction > 0 && w.roll("transient", h, i) < w.cfg.TransientFraction
}

func (w *Web) hasDeadLink(h, i int) bool {
	return w.cfg.DeadLinkFraction > 0 && w.roll("dead", h, i) < w.cfg.DeadLinkFraction
}

// links returns page (h,i)'s outgoing links as written in its HTML: a
// mix of relative, absolute and fragment forms of canonical targets, so
// that a crawler's canonicalisation is exercised.
func (w *Web) links(h, i int) []string {
	var out []string
	self := w.hosts[h]
	form := func(th, ti, k int) string {
		path := pagePath(ti)
		switch {
		case th != h:
			return "http://" + w.hosts[th] + path
		case w.cfg.PlainLinks && k%2 == 1:
			return "http://" + self + path
		case w.cfg.PlainLinks:
			return path
		case k%4 == 1:
			return "HTTP://" + self + path + "#s" + strconv.Itoa(k)
		case k%4 == 2 && ti != 0 && i == 0:
			return "p/" + strconv.Itoa(ti) + ".html" // relative to the root
		case k%4 == 2 && ti != 0:
			return strconv.Itoa(ti) + ".html" // relative to /p/
		case k%4 == 3:
			return path + "#top"
		}
		return path
	}
	// The tree: page i links to 2i+1 and 2i+2 on its host, so all of a
	// host is reachable from its root; host 0's root links every root.
	k := 0
	for _, c := range []int{2*i + 1, 2*i + 2} {
		if c < w.perHost[h] {
			out = append(out, form(h, c, k))
			k++
		}
	}
	if h == 0 && i == 0 {
		for th := 1; th < len(w.hosts); th++ {
			out = append(out, form(th, 0, k))
			k++
		}
	}
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(h)<<32|uint64(i)))
	for range w.cfg.LinksPerPage {
		th := h
		if rng.Float64() < w.cfg.CrossHostFraction {
			th = rng.IntN(len(w.hosts))
		}
		out = append(out, form(th, rng.IntN(w.perHost[th]), k))
		k++
	}
	if w.hasDeadLink(h, i) {
		out = append(out, deadPath(i))
	}
	if i == 0 {
		out = append(out, w.cfg.ExtraLinks[h]...)
	}
	return out
}

// statusRecorder notes the status a handler sends.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *Web) handler(h int) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		host := w.hosts[h]
		key := r.URL.Path
		if r.URL.RawQuery != "" {
			key += "?" + r.URL.RawQuery
		}
		at := time.Now()
		w.mu.Lock()
		agent, ok := w.agents[r.UserAgent()]
		if !ok {
			agent = r.UserAgent()
			w.agents[agent] = agent
		}
		w.hits[hit{agent, host + key}]++
		if !w.cfg.CountOnly {
			w.times[host] = append(w.times[host], at)
		}
		w.mu.Unlock()
		if !w.cfg.CountOnly {
			rec := &statusRecorder{ResponseWriter: rw}
			defer func() {
				w.mu.Lock()
				w.log[host] = append(w.log[host], Request{At: at, Path: key, Status: rec.status, Agent: agent})
				w.mu.Unlock()
			}()
			rw = rec
		}
		if d := w.latency(h); d > 0 {
			time.Sleep(d)
		}
		if intercept := w.cfg.Intercept[h]; intercept != nil && intercept(rw, r) {
			return
		}
		if fn := w.custom(h, r.URL.Path); fn != nil {
			fn(rw, r)
			return
		}
		i, err := pageIndex(r.URL.Path)
		if err != nil || i >= w.perHost[h] {
			w.mu.Lock()
			revived := w.revived
			w.mu.Unlock()
			if revived && strings.HasPrefix(r.URL.Path, "/missing/") {
				rw.Header().Set("Content-Type", "text/html")
				fmt.Fprint(rw, "<html><title>back</title><body>fixed</body></html>")
				return
			}
			http.NotFound(rw, r)
			return
		}
		if w.isTransient(h, i) {
			w.mu.Lock()
			served := w.failures[host+r.URL.Path]
			if served < w.cfg.TransientAttempts {
				w.failures[host+r.URL.Path]++
			}
			w.mu.Unlock()
			if served < w.cfg.TransientAttempts {
				http.Error(rw, "try again", http.StatusServiceUnavailable)
				return
			}
		}
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		var b strings.Builder
		fmt.Fprintf(&b, "<!doctype html><html><head><title>host %d page %d</title></head><body><h1>Page %d</h1>\n", h, i, i)
		for _, l := range w.links(h, i) {
			fmt.Fprintf(&b, "<a href=\"%s\">link</a>\n", l)
		}
		for b.Len() < w.cfg.PageBytes {
			b.WriteString("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.</p>\n")
		}
		b.WriteString("</body></html>\n")
		_, _ = rw.Write([]byte(b.String()))
	})
}

// latency is how long host h takes to answer.
func (w *Web) latency(h int) time.Duration {
	if d, ok := w.cfg.HostLatency[h]; ok {
		return d
	}
	return w.cfg.Latency
}

// custom finds a Config.Custom handler for path on host h.
func (w *Web) custom(h int, path string) http.HandlerFunc {
	routes := w.cfg.Custom[h]
	if fn, ok := routes[path]; ok {
		return fn
	}
	for p, fn := range routes {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			return fn
		}
	}
	return nil
}

var errNotAPage = errors.New("not a page")

func pageIndex(path string) (int, error) {
	if path == "/" {
		return 0, nil
	}
	rest, ok := strings.CutPrefix(path, "/p/")
	if !ok {
		return 0, errNotAPage
	}
	num, ok := strings.CutSuffix(rest, ".html")
	if !ok {
		return 0, errNotAPage
	}
	i, err := strconv.Atoi(num)
	if err != nil || i <= 0 {
		return 0, errNotAPage
	}
	return i, nil
}
