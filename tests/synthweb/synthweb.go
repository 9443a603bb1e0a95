// Package synthweb serves a deterministic synthetic web on loopback: many
// hosts (one listener each on 127.0.0.1), a fixed link graph in which every
// page is reachable from the first host's root, configurable latency and
// failures, and an access log that counts every request, by User-Agent too.
// The log is the ground truth for "every page fetched exactly once", also
// when several crawls with different user agents share one web.
//
// Pages carry validators (ETag, Last-Modified) and answer conditional GETs
// with 304, and a test can change, remove and add pages between crawls
// (changes.go), so the log also shows what a re-crawl downloaded again.
package synthweb

import (
	"cmp"
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
	"sync/atomic"
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
	// Listen is the loopback address the hosts listen on; default
	// 127.0.0.1. Another (127.0.0.2) lets a test allow this web alone.
	Listen string
}

// Request is one entry of the access log.
type Request struct {
	At     time.Time
	Path   string // with ?query when there is one
	Status int
	Agent  string // the User-Agent header
	Bytes  int64  // body bytes sent: 0 for a 304 or a HEAD
}

// Web is a running synthetic web.
type Web struct {
	cfg     Config
	hosts   []string // host:port, index = host number
	servers []*http.Server
	perHost []int // pages on each host at Start: the tree and the extra links stay among these, so Add moves no link

	mu       sync.Mutex
	hits     map[hit]int            // (agent, "host:port/path") -> requests
	agents   map[string]string      // interned User-Agent values, so hits holds one copy each
	times    map[string][]time.Time // host:port -> request arrival times
	log      map[string][]Request   // host:port -> requests in order
	failures map[string]int         // transient failures served per page
	revived  bool                   // dead links answer 200 now

	// content is what Change, Remove and Add made of the web since Start:
	// read for every page served, written between crawls. Its own lock, so
	// serving a page does not queue behind the access log.
	content  sync.RWMutex
	versions map[page]int  // pages changed, by how many versions
	gone     map[page]bool // pages removed
	added    []int         // pages Add put on each host, numbered on from perHost

	// Counters of every response since Start or Reset, atomics rather than
	// mu so that CountOnly benchmarks pay next to nothing for them.
	served    atomic.Int64
	bodyBytes atomic.Int64
	byStatus  [1000]atomic.Int64 // net/http refuses codes outside 100..999
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
	w := &Web{cfg: cfg, hits: map[hit]int{}, agents: map[string]string{}, times: map[string][]time.Time{}, log: map[string][]Request{}, failures: map[string]int{},
		versions: map[page]int{}, gone: map[page]bool{}, added: make([]int, cfg.Hosts)}
	for h := range cfg.Hosts {
		w.perHost = append(w.perHost, cfg.Pages/cfg.Hosts+boolInt(h < cfg.Pages%cfg.Hosts))
	}
	for h := range cfg.Hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(cmp.Or(cfg.Listen, "127.0.0.1"), "0"))
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

// Pages lists every page URL: the set a complete crawl fetches. Pages
// removed by Remove are not in it; pages added by Add are.
func (w *Web) Pages() []string {
	w.content.RLock()
	defer w.content.RUnlock()
	return w.urls(w.livePages())
}

// ExpectedHits is how many requests a crawl that fetches url exactly once
// makes: one, plus the 503s a transient page answers first.
func (w *Web) ExpectedHits(url string) int {
	for h, host := range w.hosts {
		if rest, ok := strings.CutPrefix(url, "http://"+host); ok {
			if i, err := pageIndex(rest); err == nil && w.state(h, i).live() && w.isTransient(h, i) {
				return 1 + w.cfg.TransientAttempts
			}
			return 1
		}
	}
	return 1
}

// DeadLinks lists the URLs pages link to that answer 404 (those of
// removed pages no longer: nothing links them).
func (w *Web) DeadLinks() []string {
	w.content.RLock()
	defer w.content.RUnlock()
	var out []string
	for _, p := range w.livePages() {
		if w.hasDeadLink(p.h, p.i) {
			out = append(out, "http://"+w.hosts[p.h]+deadPath(p.i))
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

// Traffic is what a web served since Start or the last Reset.
type Traffic struct {
	Requests  int         // every request answered, pages or not
	ByStatus  map[int]int // responses by status code: 200, 304, 410, ...
	BodyBytes int64       // response body bytes; headers are not counted
}

// Served counts the responses sent since Start or the last Reset, also in
// CountOnly mode. A response is counted when its handler returns, before
// net/http ends it, so a client that has read a response sees it counted.
func (w *Web) Served() Traffic {
	t := Traffic{Requests: int(w.served.Load()), ByStatus: map[int]int{}, BodyBytes: w.bodyBytes.Load()}
	for code := range w.byStatus {
		if n := w.byStatus[code].Load(); n > 0 {
			t.ByStatus[code] = int(n)
		}
	}
	return t
}

// Reset forgets every request served, for the next crawl of the same web.
// What Change, Remove and Add did stays.
func (w *Web) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hits, w.times, w.log, w.failures = map[hit]int{}, map[string][]time.Time{}, map[string][]Request{}, map[string]int{}
	w.served.Store(0)
	w.bodyBytes.Store(0)
	for code := range w.byStatus {
		w.byStatus[code].Store(0)
	}
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
// that a crawler's canonicalisation is exercised. A root also links the
// added pages of its host, added of them.
func (w *Web) links(h, i, added int) []string {
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
		for a := range added {
			out = append(out, form(h, w.perHost[h]+a, k))
			k++
		}
		out = append(out, w.cfg.ExtraLinks[h]...)
	}
	return out
}

// statusRecorder notes the status a handler sends and the body bytes.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	head   bool // the server discards the body of an answer to HEAD
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
	n, err := s.ResponseWriter.Write(b)
	if !s.head {
		s.bytes += int64(n)
	}
	return n, err
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
		rec := &statusRecorder{ResponseWriter: rw, head: r.Method == http.MethodHead}
		defer w.record(host, Request{At: at, Path: key, Agent: agent}, rec)
		rw = rec
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
		var st pageState
		if err == nil {
			st = w.state(h, i)
		}
		if !st.exists {
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
		w.servePage(rw, r, h, i, st)
	})
}

// record counts a response once its handler returned and, unless
// CountOnly, logs it.
func (w *Web) record(host string, req Request, rec *statusRecorder) {
	req.Status, req.Bytes = rec.status, rec.bytes
	status := rec.status
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	w.served.Add(1)
	w.bodyBytes.Add(rec.bytes)
	w.byStatus[status].Add(1)
	if w.cfg.CountOnly {
		return
	}
	w.mu.Lock()
	w.log[host] = append(w.log[host], req)
	w.mu.Unlock()
}

// servePage answers a request for page (h,i): 410 once removed, a 503 to
// the first requests of a transient page, 304 when the client's validators
// are current, else the page.
func (w *Web) servePage(rw http.ResponseWriter, r *http.Request, h, i int, st pageState) {
	if st.gone {
		http.Error(rw, "gone", http.StatusGone)
		return
	}
	if w.failTransiently(h, i, r.URL.Path) {
		http.Error(rw, "try again", http.StatusServiceUnavailable)
		return
	}
	tag, modified := etag(h, i, st.version), lastModified(st.version)
	rw.Header().Set("ETag", tag)
	rw.Header().Set("Last-Modified", modified.Format(http.TimeFormat))
	if notModified(r, tag, modified) {
		rw.WriteHeader(http.StatusNotModified)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = rw.Write([]byte(w.body(h, i, st)))
}

// failTransiently reports whether this request for a transient page is one
// of the first TransientAttempts, to be answered 503.
func (w *Web) failTransiently(h, i int, path string) bool {
	if !w.isTransient(h, i) {
		return false
	}
	key := w.hosts[h] + path
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failures[key] >= w.cfg.TransientAttempts {
		return false
	}
	w.failures[key]++
	return true
}

// body is page (h,i)'s HTML at st's version. Version 0 has no version
// line, so a web nothing changed serves the bytes it always did.
func (w *Web) body(h, i int, st pageState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><html><head><title>host %d page %d</title></head><body><h1>Page %d</h1>\n", h, i, i)
	if st.version > 0 {
		fmt.Fprintf(&b, "<p>version %d</p>\n", st.version)
	}
	for _, l := range w.links(h, i, st.added) {
		fmt.Fprintf(&b, "<a href=\"%s\">link</a>\n", l)
	}
	for b.Len() < w.cfg.PageBytes {
		b.WriteString("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.</p>\n")
	}
	b.WriteString("</body></html>\n")
	return b.String()
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
