package render

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
)

// serverRendered is a page whose server wrote its content; its script
// only enhances it, and asks for /enhance.js if it ever runs.
var serverRendered = `<!doctype html><html><head><title>article</title></head><body>
<article><h1>An article</h1><p>` + strings.Repeat("Words the server wrote for every reader. ", 5) + `</p>
<a href="/">home</a></article><script src="/enhance.js"></script></body></html>`

// With Auto, a page that is no script shell comes back as served, with no
// render (no Chromium is even started, and its script never runs); a
// script shell renders as without Auto.
func TestAutoRendersOnlyScriptShells(t *testing.T) {
	t.Parallel()
	s := newSite(t, map[string]string{"/article": serverRendered})
	b := newBrowser(t, nil)
	ctx := context.Background()
	auto := &fetch.Render{Auto: true, NetworkIdle: true, Timeout: 30 * time.Second}

	r := b.Get(ctx, s.URL+"/article", pageOptions(auto))
	if r.Err != nil || r.Rendered != nil || string(r.Body) != serverRendered {
		t.Errorf("server-rendered page: err %v, rendered %v, body %.60q; want the document as served, not rendered", r.Err, r.Rendered != nil, r.Body)
	}
	if r.Status != 200 || r.Wire == nil || r.Digest == "" {
		t.Errorf("server-rendered page: status %d, wire %v, digest %q: want a plain fetch's", r.Status, r.Wire != nil, r.Digest)
	}
	if n := s.hits("/enhance.js"); n != 0 {
		t.Errorf("/enhance.js requested %d times: the page's script ran", n)
	}
	if dirs := liveDirs(b); len(dirs) != 0 {
		t.Errorf("%d browsers started for a page that is no script shell", len(dirs))
	}

	shell := b.Get(ctx, s.URL+"/", pageOptions(auto))
	if shell.Err != nil || shell.Rendered == nil || !strings.Contains(string(shell.Body), "text-from-the-api") {
		t.Fatalf("script shell: err %v, rendered %v, body %.200q; want it rendered", shell.Err, shell.Rendered != nil, shell.Body)
	}
	if n := s.hits("/app.js"); n != 1 {
		t.Errorf("/app.js requested %d times, want once (by the shell's render)", n)
	}
}
