package render_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/render"
)

// TestOneBrowser runs this package's external tests in turn on one
// browser, as a node does: each render must leave nothing behind for the
// next, and a browser's start is the slowest part of a test. Their sites
// live on 127.0.0.2 and 127.0.0.3, the only addresses the guard allows;
// what they must not reach listens on 127.0.0.1.
func TestOneBrowser(t *testing.T) {
	t.Parallel()
	b := newTestBrowser(t, fetch.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("127.0.0.3/32")}})
	for _, c := range []struct {
		name string
		test func(*testing.T, *render.Browser)
	}{
		{"WebRTCReachesNoAddress", webRTCReachesNoAddress},
		{"RendersShareNoState", rendersShareNoState},
		{"CrossSiteFramesRequestsGoThroughTheFetcher", crossSiteFramesRequestsGoThroughTheFetcher},
		{"RenderedDocumentKeepsItsDoctype", renderedDocumentKeepsItsDoctype},
		{"AURLAskedForTwiceIsFetchedOnce", aURLAskedForTwiceIsFetchedOnce},
		{"AScreenshotIsThePageAtTheTopOfTheViewport", aScreenshotIsThePageAtTheTopOfTheViewport},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, b) })
	}
}

// serveOn127002 serves h on 127.0.0.2 (not the 127.0.0.1 of the
// forbidden listeners) and returns its base URL.
func serveOn127002(t *testing.T, h http.Handler) string {
	t.Helper()
	return serveOn(t, "127.0.0.2", h)
}

// serveOn serves h on the loopback address ip and returns its base URL.
func serveOn(t *testing.T, ip string, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

func newTestBrowser(t *testing.T, guard fetch.Guard) *render.Browser {
	t.Helper()
	path, err := render.Find()
	if err != nil {
		t.Fatalf("these tests need Chromium: %v", err)
	}
	b, err := render.New(render.Options{Path: path, Plain: fetch.New(2, guard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func renderOptions(r *fetch.Render) fetch.Options {
	return fetch.Options{
		UserAgent: "spiderpool-test", ConnectTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second,
		MaxBodyBytes: 1 << 20, KeepBody: true, Capture: true, Render: r,
	}
}
