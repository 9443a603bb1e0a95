package synthweb

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// get requests url as agent and fails the test unless it answers status.
func get(t *testing.T, c *http.Client, agent, url string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", agent)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s as %s: %v", url, agent, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s as %s: status %d, want %d", url, agent, resp.StatusCode, status)
	}
}

func start(t *testing.T, cfg Config) *Web {
	t.Helper()
	w, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// TestHostLatencyOverridesLatency: host 0's zero and host 1's 100ms replace
// a 10s Latency; a client giving up after 5s fails the test if either
// host still waits the 10s, or adds it.
func TestHostLatencyOverridesLatency(t *testing.T) {
	w := start(t, Config{Hosts: 2, Pages: 4, Seed: 1, Latency: 10 * time.Second,
		HostLatency: map[int]time.Duration{0: 0, 1: 100 * time.Millisecond}})
	c := &http.Client{Timeout: 5 * time.Second}
	get(t, c, "t", w.URL(0, 0), 200)
	began := time.Now()
	get(t, c, "t", w.URL(1, 0), 200)
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Errorf("host 1 answered in %v, want at least its HostLatency 100ms", took)
	}
}

// TestRootsSeedEveryHost: one root per host, each a page of the web that
// links on into its own host's tree.
func TestRootsSeedEveryHost(t *testing.T) {
	w := start(t, Config{Hosts: 3, Pages: 30, Seed: 1})
	roots := w.Roots()
	if len(roots) != 3 {
		t.Fatalf("Roots() = %v, want one per host", roots)
	}
	for h, r := range roots {
		if r != w.URL(h, 0) || !slices.Contains(w.Pages(), r) {
			t.Errorf("root %d = %s, want %s, a page of the web", h, r, w.URL(h, 0))
		}
		if links := w.links(h, 0, 0); !slices.Contains(links, "/p/1.html") {
			t.Errorf("root of host %d links %v, not its page 1", h, links)
		}
	}
}

// TestRequestsCountedPerAgent: two agents crawl the same web; each agent's
// tally sees only its own requests, and the log names the agent of each.
func TestRequestsCountedPerAgent(t *testing.T) {
	for _, countOnly := range []bool{false, true} {
		w := start(t, Config{Hosts: 2, Pages: 10, Seed: 1, CountOnly: countOnly})
		c := &http.Client{}
		pages := w.Pages()
		for _, p := range pages {
			get(t, c, "agent-a", p, 200)
		}
		for _, p := range pages[1:] { // b misses the first page and fetches the last twice
			get(t, c, "agent-b", p, 200)
		}
		last := pages[len(pages)-1]
		get(t, c, "agent-b", last, 200)
		robots := "http://" + w.Hosts()[0] + "/robots.txt"
		get(t, c, "agent-a", robots, 404)
		get(t, c, "agent-b", robots, 404)

		if m, d := w.TallyAgent("agent-a"); m != 0 || d != 0 {
			t.Errorf("CountOnly=%v: agent-a missing %d, duplicates %d; want 0, 0", countOnly, m, d)
		}
		if m, d := w.TallyAgent("agent-b"); m != 1 || d != 1 {
			t.Errorf("CountOnly=%v: agent-b missing %d, duplicates %d; want 1, 1", countOnly, m, d)
		}
		if m, d := w.TallyAgent("nobody"); m != len(pages) || d != 0 {
			t.Errorf("CountOnly=%v: an unseen agent missing %d, duplicates %d; want %d, 0", countOnly, m, d, len(pages))
		}
		if n := w.HitsBy("agent-b")[last]; n != 2 {
			t.Errorf("CountOnly=%v: agent-b hit %s %d times, want 2", countOnly, last, n)
		}
		if n := w.Hits()[last]; n != 3 {
			t.Errorf("CountOnly=%v: Hits() counts %s %d times over both agents, want 3", countOnly, last, n)
		}
		if n := w.Hits()[robots]; n != 2 {
			t.Errorf("CountOnly=%v: robots.txt of host 0 hit %d times, want 2", countOnly, n)
		}
		if countOnly {
			continue
		}
		agents := map[string]int{}
		for _, r := range w.Log(w.Hosts()[0]) {
			if r.Path == "/robots.txt" {
				agents[r.Agent]++
			}
		}
		if agents["agent-a"] != 1 || agents["agent-b"] != 1 || len(agents) != 2 {
			t.Errorf("robots.txt requests in host 0's log by agent: %v, want one each of agent-a and agent-b", agents)
		}
	}
}

// response is what fetch saw of one answer.
type response struct {
	status int
	header http.Header
	body   string
}

// fetch sends method to url with the headers given as name, value pairs.
func fetch(t *testing.T, method, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k+1 < len(headers); k += 2 {
		req.Header.Add(headers[k], headers[k+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return response{resp.StatusCode, resp.Header, string(body)}
}

// TestUnchangedWebServesTheSameBytes: every page of two webs nothing
// changed hashes to what the package served before pages had versions
// (hashes taken from that code, ports written as host numbers), so
// existing tests see no difference.
func TestUnchangedWebServesTheSameBytes(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Hosts: 3, Pages: 40, Seed: 5, LinksPerPage: 3, CrossHostFraction: 0.3, DeadLinkFraction: 0.2, PageBytes: 600, ExtraLinks: map[int][]string{1: {"/x"}}},
			"f0f5623dc59e8668060822ae171c66dd89eebf643e3666d0523c8589c0e25c3f"},
		{Config{Hosts: 2, Pages: 9, Seed: 2, LinksPerPage: 1, PlainLinks: true},
			"43ba4503f159535d70a283dc4d8e50bcddc549b0f44df6ba1616e319b6edc87c"},
	} {
		w := start(t, c.cfg)
		h := sha256.New()
		for _, p := range w.Pages() {
			r := fetch(t, http.MethodGet, p)
			fmt.Fprintf(h, "%d %s\n", r.status, withHostNumbers(w, r.body))
		}
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != c.want {
			t.Errorf("pages of %+v hash to %s, want %s as before versions", c.cfg, got, c.want)
		}
	}
}

// TestConditionalGetAnswers304ForTheCurrentVersion: a page names its
// version in a strong ETag and Last-Modified; If-None-Match (list, weak or
// *) wins over If-Modified-Since, which answers 304 at or after
// Last-Modified.
func TestConditionalGetAnswers304ForTheCurrentVersion(t *testing.T) {
	w := start(t, Config{Hosts: 2, Pages: 10, Seed: 1})
	u := w.URL(1, 3)
	first := fetch(t, http.MethodGet, u)
	tag, modified := first.header.Get("ETag"), first.header.Get("Last-Modified")
	if first.status != 200 || tag != `"h1-p3-v0"` || modified != "Mon, 01 Jan 2024 00:00:00 GMT" {
		t.Fatalf("GET %s: status %d, ETag %s, Last-Modified %q; want 200, \"h1-p3-v0\", Mon, 01 Jan 2024 00:00:00 GMT", u, first.status, tag, modified)
	}
	lm, err := http.ParseTime(modified)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string { return lm.Add(d).Format(http.TimeFormat) }
	for _, c := range []struct {
		headers []string
		want    int
	}{
		{[]string{"If-None-Match", tag}, 304},
		{[]string{"If-None-Match", "W/" + tag}, 304},
		{[]string{"If-None-Match", `"a,b", W/"x", ` + tag}, 304},
		{[]string{"If-None-Match", `"x"`, "If-None-Match", tag}, 304},
		{[]string{"If-None-Match", "*"}, 304},
		{[]string{"If-None-Match", `"h1-p3-v1"`}, 200},
		{[]string{"If-None-Match", `"h1-p3-v0`}, 200},
		{[]string{"If-None-Match", `"h1-p3-v1"`, "If-Modified-Since", at(time.Hour)}, 200}, // If-None-Match wins
		{[]string{"If-Modified-Since", modified}, 304},
		{[]string{"If-Modified-Since", at(time.Hour)}, 304},
		{[]string{"If-Modified-Since", at(-time.Second)}, 200},
		{[]string{"If-Modified-Since", "yesterday"}, 200},
	} {
		r := fetch(t, http.MethodGet, u, c.headers...)
		if r.status != c.want {
			t.Errorf("GET %s with %q: status %d, want %d", u, c.headers, r.status, c.want)
		}
		if r.status == 304 && (r.body != "" || r.header.Get("ETag") != tag || r.header.Get("Last-Modified") != modified) {
			t.Errorf("304 to %q: body %q, ETag %s, Last-Modified %s; want no body and the validators", c.headers, r.body, r.header.Get("ETag"), r.header.Get("Last-Modified"))
		}
		if r.status == 200 && r.body != first.body {
			t.Errorf("200 to %q: a body other than the page's", c.headers)
		}
	}
	if r := fetch(t, http.MethodPost, u, "If-None-Match", tag); r.status != 200 {
		t.Errorf("POST with the current ETag: status %d, want 200 (only GET and HEAD answer 304)", r.status)
	}
}

var hrefs = regexp.MustCompile(`href="([^"]*)"`)

// links lists the hrefs of a body.
func links(body string) []string {
	var out []string
	for _, m := range hrefs.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestChangeVersionsAFraction: Change(0.1) changes exactly a tenth of the
// pages, the same ones for the same seed; only those answer 200 to their
// old validators, with a "version 1" line and the links they had.
func TestChangeVersionsAFraction(t *testing.T) {
	cfg := Config{Hosts: 3, Pages: 95, Seed: 4, LinksPerPage: 3, CrossHostFraction: 0.3}
	w := start(t, cfg)
	before := map[string]response{}
	for _, p := range w.Pages() {
		before[p] = fetch(t, http.MethodGet, p)
	}
	changed := w.Change(0.1, 7)
	if len(changed) != 10 { // round(9.5)
		t.Fatalf("Change(0.1) of 95 pages changed %d: %v, want 10", len(changed), changed)
	}
	twin := start(t, cfg)
	if again := twin.Change(0.1, 7); withHostNumbers(twin, strings.Join(again, " ")) != withHostNumbers(w, strings.Join(changed, " ")) {
		t.Errorf("Change(0.1, 7) picked %v on one web and %v on its twin", changed, again)
	}
	w.Reset()
	for p, old := range before {
		byTag := fetch(t, http.MethodGet, p, "If-None-Match", old.header.Get("ETag"))
		byDate := fetch(t, http.MethodGet, p, "If-Modified-Since", old.header.Get("Last-Modified"))
		want := 304
		if slices.Contains(changed, p) {
			want = 200
			if !strings.Contains(byTag.body, "<p>version 1</p>") || !slices.Equal(links(byTag.body), links(old.body)) {
				t.Errorf("changed page %s: body %q, want a version 1 line and the links %v", p, byTag.body, links(old.body))
			}
			if byTag.header.Get("ETag") == old.header.Get("ETag") || byTag.header.Get("Last-Modified") == old.header.Get("Last-Modified") {
				t.Errorf("changed page %s kept its validators %s, %s", p, old.header.Get("ETag"), old.header.Get("Last-Modified"))
			}
		}
		if byTag.status != want || byDate.status != want {
			t.Errorf("%s with its old ETag: %d, with its old Last-Modified: %d; want %d", p, byTag.status, byDate.status, want)
		}
	}
	if s := w.Served(); s.ByStatus[200] != 2*10 || s.ByStatus[304] != 2*85 || s.Requests != 2*95 {
		t.Errorf("Served() = %+v, want 20 200s and 170 304s in 190 requests", s)
	}
}

// withHostNumbers writes w's host:port as host0, host1, ... in s: twin
// webs differ only in their ports.
func withHostNumbers(w *Web, s string) string {
	for h, host := range w.Hosts() {
		s = strings.ReplaceAll(s, host, fmt.Sprintf("host%d", h))
	}
	return s
}

// reachable crawls w from its seed and returns the URLs that answered 200.
func reachable(t *testing.T, w *Web) []string {
	t.Helper()
	seen := map[string]bool{w.Seed(): true}
	queue := []string{w.Seed()}
	var ok []string
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		r := fetch(t, http.MethodGet, u)
		if r.status != 200 {
			continue
		}
		ok = append(ok, u)
		base, _ := url.Parse(u)
		for _, l := range links(r.body) {
			ref, err := url.Parse(l)
			if err != nil {
				t.Fatal(err)
			}
			next := base.ResolveReference(ref)
			next.Fragment = ""
			if s := next.String(); !seen[s] {
				seen[s] = true
				queue = append(queue, s)
			}
		}
	}
	slices.Sort(ok)
	return ok
}

// TestRemoveTakesLeaves: removed pages answer 410 and leave Pages; every
// page left is still reachable from the seed; asking for more pages than
// there are leaves removes every leaf and no more.
func TestRemoveTakesLeaves(t *testing.T) {
	w := start(t, Config{Hosts: 2, Pages: 60, Seed: 3, LinksPerPage: 2, CrossHostFraction: 0.5, DeadLinkFraction: 1})
	removed := w.Remove(0.1, 9)
	if len(removed) != 6 || !slices.Equal(w.Removed(), removed) {
		t.Fatalf("Remove(0.1) of 60 pages removed %v (Removed() %v), want 6", removed, w.Removed())
	}
	for _, u := range removed {
		if r := fetch(t, http.MethodGet, u); r.status != http.StatusGone {
			t.Errorf("removed %s: status %d, want 410", u, r.status)
		}
		if slices.Contains(w.Pages(), u) {
			t.Errorf("removed %s still in Pages()", u)
		}
	}
	if n := len(w.DeadLinks()); n != 60-6 {
		t.Errorf("%d dead links, want 54: one per page left", n)
	}
	if s := w.Served(); s.ByStatus[410] != 6 {
		t.Errorf("Served() = %+v, want 6 410s", s)
	}
	if got, want := reachable(t, w), slices.Sorted(slices.Values(w.Pages())); !slices.Equal(got, want) {
		t.Errorf("after Remove, the crawl reached %d pages, want the %d of Pages()", len(got), len(want))
	}

	all := w.Remove(1, 1)
	if len(all) != 30-6 || len(w.Pages()) != 30 { // 30 leaves, 15 on each host: pages 15..29
		t.Errorf("Remove(1) removed %d more, leaving %d pages; want 24 more, leaving the 30 inner pages", len(all), len(w.Pages()))
	}
	if got, want := reachable(t, w), slices.Sorted(slices.Values(w.Pages())); !slices.Equal(got, want) {
		t.Errorf("with every leaf removed, the crawl reached %d pages, want the %d of Pages()", len(got), len(want))
	}
}

// TestAddLinksNewPagesFromRoots: added pages are reachable, their roots
// change, and every other page still matches its old ETag.
func TestAddLinksNewPagesFromRoots(t *testing.T) {
	w := start(t, Config{Hosts: 3, Pages: 12, Seed: 2, LinksPerPage: 2, CrossHostFraction: 0.5})
	tags := map[string]string{}
	for _, p := range w.Pages() {
		tags[p] = fetch(t, http.MethodGet, p).header.Get("ETag")
	}
	added, relinked := w.Add(4)
	wantAdded := []string{w.URL(0, 4), w.URL(0, 5), w.URL(1, 4), w.URL(2, 4)}
	if !slices.Equal(added, wantAdded) || !slices.Equal(relinked, w.Roots()) {
		t.Fatalf("Add(4) = %v, %v; want %v, %v", added, relinked, wantAdded, w.Roots())
	}
	if got, want := reachable(t, w), slices.Sorted(slices.Values(w.Pages())); !slices.Equal(got, want) || len(want) != 16 {
		t.Errorf("after Add, the crawl reached %v, want the 16 of Pages() %v", got, want)
	}
	for p, tag := range tags {
		want := 304
		if slices.Contains(relinked, p) {
			want = 200
		}
		if r := fetch(t, http.MethodGet, p, "If-None-Match", tag); r.status != want {
			t.Errorf("%s with its ETag from before Add: %d, want %d", p, r.status, want)
		}
	}
}

// TestServedCountsBodyBytes: body bytes of 200s and 404s count, 304s and
// HEADs add none, the log carries each request's bytes, and Reset zeroes
// it all; in CountOnly mode too.
func TestServedCountsBodyBytes(t *testing.T) {
	for _, countOnly := range []bool{false, true} {
		w := start(t, Config{Hosts: 1, Pages: 5, Seed: 1, PageBytes: 3000, CountOnly: countOnly})
		var want int64
		for _, p := range w.Pages() {
			r := fetch(t, http.MethodGet, p)
			want += int64(len(r.body))
			fetch(t, http.MethodGet, p, "If-None-Match", r.header.Get("ETag"))
			fetch(t, http.MethodHead, p)
		}
		missing := fetch(t, http.MethodGet, w.Seed()+"nothing")
		want += int64(len(missing.body))
		s := w.Served()
		if s.BodyBytes != want || s.Requests != 16 || s.ByStatus[200] != 10 || s.ByStatus[304] != 5 || s.ByStatus[404] != 1 {
			t.Errorf("CountOnly=%v: Served() = %+v, want %d body bytes in 16 requests: 10 200s (5 of them HEAD), 5 304s, a 404", countOnly, s, want)
		}
		if !countOnly {
			var logged int64
			for _, r := range w.Log(w.Hosts()[0]) {
				logged += r.Bytes
			}
			if logged != want {
				t.Errorf("the log's Bytes add up to %d, want %d", logged, want)
			}
		}
		w.Reset()
		if s := w.Served(); s.Requests != 0 || s.BodyBytes != 0 || len(s.ByStatus) != 0 {
			t.Errorf("CountOnly=%v: Served() after Reset = %+v, want nothing", countOnly, s)
		}
	}
}

// TestSPAServesAShellAndABoundedFeed: without a script, every route is the
// same shell with no link; the feed's API ends after Items items; the
// plain pages are plain.
func TestSPAServesAShellAndABoundedFeed(t *testing.T) {
	spa := NewSPA("http://127.0.0.1:9/")
	w, err := Start(Config{Hosts: 1, Pages: 1, Custom: map[int]map[string]http.HandlerFunc{0: spa.Site()}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	base := "http://" + w.Hosts()[0]
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, shell := get(SPARoot)
	for _, p := range []string{SPAFeed, "/app/view/3", SPASpin} {
		if _, b := get(p); b != shell {
			t.Errorf("%s is not the shell: %q", p, b)
		}
	}
	if strings.Contains(shell, "<a ") {
		t.Errorf("the shell has a link: %s", shell)
	}
	items := 0
	for p := 0; ; p++ {
		code, b := get(fmt.Sprintf("/app/api/feed?page=%d", p))
		if code != http.StatusOK {
			t.Fatalf("feed page %d: %d", p, code)
		}
		var d struct {
			Items []struct{ Name, Href string }
			End   bool
		}
		if err := json.Unmarshal([]byte(b), &d); err != nil {
			t.Fatal(err)
		}
		items += len(d.Items)
		if d.End {
			break
		}
	}
	if items != spa.Items {
		t.Errorf("the feed gave %d items, want %d", items, spa.Items)
	}
	if code, _ := get("/app/item/200"); code != http.StatusOK {
		t.Errorf("item 200: %d", code)
	}
	if code, _ := get("/app/item/201"); code != http.StatusNotFound {
		t.Errorf("item 201: %d, want 404", code)
	}
	if n := len(spa.Pages()); n != 4+2*spa.Views+spa.Items {
		t.Errorf("%d pages", n)
	}
}
