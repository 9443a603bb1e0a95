package render

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
)

// site is a test web on 127.0.0.2 that counts the requests for each path.
type site struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
	// slow tells of each request for /slow, which is answered only when
	// its client goes away.
	slow chan struct{}
}

func (s *site) hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[path]
}

func (s *site) all() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for k, v := range s.count {
		m[k] = v
	}
	return m
}

const spaIndex = `<!doctype html><html><head><title>spa</title></head><body>
<nav id="nav"></nav><p id="text">loading</p>
<div style="height:4000px">spacer</div>
<img id="lazy" data-src="/img/lazy.png" width="10" height="10" alt="">
<script src="/app.js"></script>
</body></html>`

const spaScript = `
for (const n of ["alpha", "beta"]) {
  const a = document.createElement("a");
  a.href = "/page/" + n;
  a.textContent = "go " + n;
  document.getElementById("nav").appendChild(a);
}
// /api/old redirects to /api/data: the browser follows the fulfilled 302.
fetch("/api/old").then(r => r.text()).then(t => { document.getElementById("text").textContent = t; });
const img = document.getElementById("lazy");
window.lazyObserver = new IntersectionObserver((entries, o) => {
  for (const e of entries) if (e.isIntersecting) { img.src = img.dataset.src; o.disconnect(); }
});
window.lazyObserver.observe(img);
window.spaDone = true;
`

// a 1x1 PNG
var pixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

func html(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	}
}

func newSite(t *testing.T, extra map[string]string) *site {
	t.Helper()
	s := &site{count: map[string]int{}, slow: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		s.slow <- struct{}{}
		<-r.Context().Done()
	})
	mux.HandleFunc("/waits", html(`<html><body><p>waits</p><script>fetch("/slow")</script></body></html>`))
	html := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		}
	}
	mux.HandleFunc("/", html(spaIndex))
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		// gzipped, so the render must serve Chromium the decoded body
		// without the Content-Encoding that described it
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write([]byte(spaScript))
		zw.Close()
	})
	mux.Handle("/api/old", http.RedirectHandler("/api/data", http.StatusFound))
	mux.HandleFunc("/api/data", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "text-from-the-api")
	})
	mux.HandleFunc("/img/lazy.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write(pixel)
	})
	for path, body := range extra {
		mux.HandleFunc(path, html(body))
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.count[r.URL.Path]++
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.2: %v", err)
	}
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newBrowser(t *testing.T, plain *fetch.Fetcher) *Browser {
	t.Helper()
	path, err := Find()
	if err != nil {
		t.Fatalf("these tests need Chromium: %v", err)
	}
	if plain == nil {
		plain = fetch.New(2, fetch.Guard{AllowPrivate: true})
	}
	b, err := New(Options{Path: path, Plain: plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func pageOptions(r *fetch.Render) fetch.Options {
	return fetch.Options{
		UserAgent:      "spiderpool-test",
		ConnectTimeout: 2 * time.Second,
		RequestTimeout: 5 * time.Second,
		MaxBodyBytes:   1 << 20,
		KeepBody:       true,
		Capture:        true,
		Render:         r,
	}
}

func TestRenderRunsScriptsAndFetchesThroughThePlainFetcher(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, nil)
	ctx := context.Background()
	// Two sites at once, in the Browser's two tabs.
	sites := []*site{newSite(t, nil), newSite(t, nil)}
	got := make([]fetch.Response, len(sites))
	var wg sync.WaitGroup
	for i, s := range sites {
		wg.Go(func() {
			got[i] = b.Get(ctx, s.URL+"/", pageOptions(&fetch.Render{NetworkIdle: true, IdleCap: 5 * time.Second, Timeout: 30 * time.Second, ScrollSteps: 8, ScrollWait: 2 * time.Second}))
		})
	}
	wg.Wait()
	for i, s := range sites {
		checkSPA(t, s, got[i])
	}

	// Without Render it is the plain fetcher's GET, body as served.
	p := b.Get(ctx, sites[0].URL+"/", pageOptions(nil))
	if p.Err != nil || p.Rendered != nil || string(p.Body) != spaIndex {
		t.Errorf("plain Get: err %v, rendered %v, body %.40q", p.Err, p.Rendered != nil, p.Body)
	}

	// Check refuses a request, here a redirect's target, and counts it.
	s := newSite(t, nil)
	o := pageOptions(&fetch.Render{NetworkIdle: true, Timeout: 30 * time.Second, Check: func(u string) error {
		if strings.HasSuffix(u, "/api/data") {
			return errors.New("out of scope")
		}
		return nil
	}})
	r := b.Get(ctx, s.URL+"/", o)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if s.hits("/api/data") != 0 || s.hits("/api/old") != 1 || r.Rendered.Refused != 1 {
		t.Errorf("api hits %d, refused %d; want 0 and 1 (the redirect's target)", s.hits("/api/data"), r.Rendered.Refused)
	}
	if !strings.Contains(string(r.Body), `href="/page/alpha"`) {
		t.Errorf("the page did not render: %s", r.Body)
	}
}

// checkSPA checks a render of the single-page app on s.
func checkSPA(t *testing.T, s *site, r fetch.Response) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	if r.Rendered == nil {
		t.Fatal("Rendered is nil")
	}
	body := string(r.Body)
	for _, want := range []string{`href="/page/alpha"`, `href="/page/beta"`, "text-from-the-api", ` src="/img/lazy.png"`} {
		if !strings.Contains(body, want) {
			t.Errorf("rendered DOM lacks %s:\n%s", want, body)
		}
	}
	if !strings.HasPrefix(body, "<!DOCTYPE html>\n<html") {
		t.Errorf("rendered DOM starts %.40q", body)
	}
	if string(r.Rendered.Original) != spaIndex {
		t.Errorf("Original is not the served document: %.60q", r.Rendered.Original)
	}
	if r.Status != 200 || r.Wire == nil || r.Digest == "" || r.Length != int64(len(spaIndex)) {
		t.Errorf("document fields: status %d, wire %v, digest %q, length %d", r.Status, r.Wire != nil, r.Digest, r.Length)
	}
	for _, path := range []string{"/", "/app.js", "/api/old", "/api/data", "/img/lazy.png"} {
		if n := s.hits(path); n != 1 {
			t.Errorf("%s requested %d times, want once (all: %v)", path, n, s.all())
		}
	}
	var api *fetch.Resource
	for i, res := range r.Rendered.Resources {
		if strings.HasSuffix(res.URL, "/api/data") {
			api = &r.Rendered.Resources[i]
		}
	}
	if api == nil {
		t.Fatalf("no /api/data among the resources: %+v", r.Rendered.Resources)
	}
	if api.Status != 200 || api.ContentType != "text/plain" || api.Wire == nil || !bytes.Contains(api.Wire.Response, []byte("text-from-the-api")) {
		t.Errorf("/api/data resource: %+v", api)
	}
	var order []string
	for _, res := range r.Rendered.Resources {
		order = append(order, strings.TrimPrefix(res.URL, s.URL))
	}
	if strings.Join(order, " ") != "/app.js /api/old /api/data /img/lazy.png" {
		t.Errorf("resources in order: %v", order)
	}
}

func TestEndlessScriptFailsWithinTheTimeoutAndTheNextPageRenders(t *testing.T) {
	t.Parallel()
	s := newSite(t, map[string]string{"/spin": `<html><body><p>spin</p><script>for(;;){}</script></body></html>`})
	b := newBrowser(t, nil)
	ctx := context.Background()
	r := b.Get(ctx, s.URL+"/spin", pageOptions(&fetch.Render{Timeout: 2 * time.Second}))
	if !errors.Is(r.Err, fetch.ErrRender) || !strings.Contains(r.Err.Error(), "spec.render.timeout") {
		t.Fatalf("err = %v, want an ErrRender naming spec.render.timeout", r.Err)
	}
	if r.Status != 200 || !strings.Contains(string(r.Body), "for(;;)") || r.Rendered != nil {
		t.Errorf("a failed render returns the document as served: status %d body %.40q", r.Status, r.Body)
	}
	if v := fetch.Classify(&r, nil); v != fetch.Final {
		t.Errorf("Classify = %v, want Final", v)
	}
	ok := b.Get(ctx, s.URL+"/", pageOptions(&fetch.Render{NetworkIdle: true, Timeout: 30 * time.Second}))
	if ok.Err != nil || !strings.Contains(string(ok.Body), "text-from-the-api") {
		t.Fatalf("the next render: err %v, body %.200q", ok.Err, ok.Body)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func TestGuardHoldsForThePagesRequests(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := &countingListener{Listener: raw}
	innerSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret") })}
	go innerSrv.Serve(inner)
	t.Cleanup(func() { innerSrv.Close() })
	inside := "http://" + raw.Addr().String() + "/secret"

	var s *site
	page := `<html><head><link rel="preconnect" href="http://%[2]s/"><link rel="dns-prefetch" href="http://%[2]s/"></head>
<body><p id="out">waiting</p><script>
fetch(%[1]q).then(r => r.text()).then(t => { out.textContent = "leaked " + t }, e => { out.textContent = "refused" });
try { new WebSocket("ws://" + location.host + "/ws"); } catch (e) {}
</script></body></html>`
	s = newSite(t, map[string]string{"/guarded": fmt.Sprintf(page, inside, raw.Addr().String())})
	guard := fetch.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	b := newBrowser(t, fetch.New(2, guard))
	r := b.Get(context.Background(), s.URL+"/guarded", pageOptions(&fetch.Render{NetworkIdle: true, Timeout: 30 * time.Second}))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	if !strings.Contains(string(r.Body), `<p id="out">refused</p>`) {
		t.Errorf("the page's fetch was not refused: %s", r.Body)
	}
	if n := inner.n.Load(); n != 0 {
		t.Errorf("the guarded listener accepted %d connections", n)
	}
	if n := s.hits("/ws"); n != 0 {
		t.Errorf("a websocket reached the site %d times", n)
	}
	if r.Rendered.Refused != 1 {
		t.Errorf("Refused = %d, want 1 (the websocket)", r.Rendered.Refused)
	}
	var found bool
	for _, res := range r.Rendered.Resources {
		if res.URL == inside {
			found = true
			if !errors.Is(res.Err, fetch.ErrBlocked) {
				t.Errorf("resource %s: err %v, want ErrBlocked", res.URL, res.Err)
			}
		}
	}
	if !found {
		t.Errorf("no resource for %s: %+v", inside, r.Rendered.Resources)
	}
}

// processesUsing lists the pids whose command line names dir.
func processesUsing(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// waitSlow waits for the page to ask for /slow.
func (s *site) waitSlow(t *testing.T) {
	t.Helper()
	select {
	case <-s.slow:
	case <-time.After(time.Minute):
		t.Fatal("the page never asked for /slow")
	}
}

// liveDirs lists the profiles of the browsers b has running.
func liveDirs(b *Browser) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var dirs []string
	for in := range b.live {
		dirs = append(dirs, in.dir)
	}
	return dirs
}

// killChromium kills the processes of the profile dir whose command line
// has all of has and none of hasNot, and says how many.
func killChromium(t *testing.T, dir, has, hasNot string) int {
	t.Helper()
	n := 0
	for _, pid := range processesUsing(dir) {
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if has != "" && !bytes.Contains(cmdline, []byte(has)) || hasNot != "" && bytes.Contains(cmdline, []byte(hasNot)) {
			continue
		}
		id, _ := strconv.Atoi(pid)
		if syscall.Kill(id, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func TestCrashedTabAndDeadBrowserFailTheRenderAndTheNextOneWorks(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	b := newBrowser(t, nil)
	ctx := context.Background()
	o := pageOptions(&fetch.Render{NetworkIdle: true, IdleCap: 10 * time.Second, Timeout: 30 * time.Second})
	for _, c := range []struct {
		name, has, hasNot, want string
	}{
		{"renderer", "--type=renderer", "", "crashed"},
		{"browser", "", "--type=", "browser died"},
	} {
		got := make(chan fetch.Response, 1)
		go func() { got <- b.Get(ctx, s.URL+"/waits", o) }()
		s.waitSlow(t)
		dirs := liveDirs(b)
		if len(dirs) != 1 {
			t.Fatalf("%d browsers live, want 1", len(dirs))
		}
		if n := killChromium(t, dirs[0], c.has, c.hasNot); n == 0 {
			t.Fatalf("no %s process to kill", c.name)
		}
		select {
		case r := <-got:
			if !errors.Is(r.Err, fetch.ErrRender) || !strings.Contains(r.Err.Error(), c.want) {
				t.Errorf("killed %s: err = %v, want an ErrRender saying %q", c.name, r.Err, c.want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("killed %s: Get did not return", c.name)
		}
	}
	// (The second round's render began after the renderer's crash.)
	r := b.Get(ctx, s.URL+"/", pageOptions(&fetch.Render{NetworkIdle: true, Timeout: 30 * time.Second}))
	if r.Err != nil || !strings.Contains(string(r.Body), "text-from-the-api") {
		t.Fatalf("after killing the browser: err %v, body %.200q", r.Err, r.Body)
	}
}

func TestGetWaitsForATabAsLongAsItsContextAllows(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	path, err := Find()
	if err != nil {
		t.Fatalf("these tests need Chromium: %v", err)
	}
	b, err := New(Options{Path: path, Plain: fetch.New(2, fetch.Guard{AllowPrivate: true}), Tabs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	busyCtx, stopBusy := context.WithCancel(context.Background())
	busy := make(chan fetch.Response, 1)
	go func() {
		busy <- b.Get(busyCtx, s.URL+"/waits", pageOptions(&fetch.Render{NetworkIdle: true, IdleCap: 10 * time.Second, Timeout: 30 * time.Second}))
	}()
	s.waitSlow(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := b.Get(ctx, s.URL+"/", pageOptions(&fetch.Render{Timeout: 30 * time.Second}))
	if !errors.Is(r.Err, context.DeadlineExceeded) || errors.Is(r.Err, fetch.ErrRender) {
		t.Errorf("err = %v, want the context's deadline and no ErrRender", r.Err)
	}
	if r.Status != 200 {
		t.Errorf("status %d: the document is fetched before the wait for a tab", r.Status)
	}
	stopBusy()
	if br := <-busy; br.Err == nil || errors.Is(br.Err, fetch.ErrRender) || fetch.Classify(&br, nil) != fetch.Transient {
		t.Errorf("canceled render: err %v, want a transient, non-ErrRender failure", br.Err)
	}
}

func TestRecycleAndCloseLeaveNoProcess(t *testing.T) {
	t.Parallel()
	s := newSite(t, map[string]string{"/static": `<html><body><p>static</p></body></html>`})
	path, err := Find()
	if err != nil {
		t.Fatalf("these tests need Chromium: %v", err)
	}
	b, err := New(Options{Path: path, Plain: fetch.New(2, fetch.Guard{AllowPrivate: true}), RecycleAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var seen [][]string
	for range 3 {
		r := b.Get(context.Background(), s.URL+"/static", pageOptions(&fetch.Render{Timeout: 30 * time.Second}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		seen = append(seen, liveDirs(b))
	}
	// The second page's close stops the browser; the third starts another.
	if len(seen[0]) != 1 || len(seen[1]) != 0 || len(seen[2]) != 1 || seen[0][0] == seen[2][0] {
		t.Fatalf("live profiles after each page: %v, want one, none, another", seen)
	}
	if left := processesUsing(seen[0][0]); len(left) != 0 {
		t.Errorf("the recycled browser left processes: %v", left)
	}

	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	dir := seen[2][0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesUsing(dir)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left after Close: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("user data dir %s still there: %v", dir, err)
	}
	// A node that stops is no fault of the page: the failure is transient.
	if r := b.Get(context.Background(), s.URL+"/static", pageOptions(&fetch.Render{})); r.Err == nil || errors.Is(r.Err, fetch.ErrRender) || fetch.Classify(&r, nil) != fetch.Transient {
		t.Errorf("Get after Close: err %v, want a transient failure, no ErrRender", r.Err)
	}
}
