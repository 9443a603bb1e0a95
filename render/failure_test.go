package render_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/render"
)

// A browser that will not start is the node's fault, not the page's: its
// pages fail transiently (to be tried again, maybe on another node), not
// with ErrRender, which fetch.Classify makes final.
func TestABrowserThatWillNotStartFailsPagesTransiently(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<html><body>page</body></html>`))
	}))
	b, err := render.New(render.Options{Path: broken, Plain: fetch.New(2, fetch.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r := b.Get(context.Background(), site+"/", renderOptions(&fetch.Render{Timeout: 10 * time.Second}))
	if r.Err == nil || errors.Is(r.Err, fetch.ErrRender) || fetch.Classify(&r, nil) != fetch.Transient {
		t.Errorf("err %v (classified %v), want a transient failure without ErrRender", r.Err, fetch.Classify(&r, nil))
	}
	if r.Status != 200 || string(r.Body) != `<html><body>page</body></html>` {
		t.Errorf("the document as served should come back: status %d, body %q", r.Status, r.Body)
	}
}
