package render_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/render"
)

// The tests here check that a render returns the page as a browser has
// it, and asks its host no more than a browser would. TestOneBrowser
// runs them.

func renderedDocumentKeepsItsDoctype(t *testing.T, b *render.Browser) {
	const strict = `<!DOCTYPE html PUBLIC "-//W3C//DTD HTML 4.01//EN" "http://www.w3.org/TR/html4/strict.dtd">`
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/quirks":
			fmt.Fprint(w, `<html><body><p>quirks</p></body></html>`)
		case "/strict":
			fmt.Fprint(w, strict+`<html><body><p>strict</p></body></html>`)
		}
	}))
	for path, want := range map[string]string{"/quirks": "<html><head></head><body><p>quirks", "/strict": strict + "\n<html><head></head><body><p>strict"} {
		r := b.Get(context.Background(), site+path, renderOptions(&fetch.Render{Timeout: 20 * time.Second}))
		if r.Err != nil {
			t.Fatalf("render %s: %v", path, r.Err)
		}
		if !strings.HasPrefix(string(r.Body), want) {
			t.Errorf("%s rendered as %.150q, want it to begin %q", path, r.Body, want)
		}
	}
}

func aURLAskedForTwiceIsFetchedOnce(t *testing.T, b *render.Browser) {
	var mu sync.Mutex
	hits := map[string]int{}
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			// One fetch after the other, and two at once.
			fmt.Fprint(w, `<html><body><p id="out"></p><script>
fetch("/api/a").then(r => r.text())
  .then(() => fetch("/api/a")).then(r => r.text())
  .then(a => Promise.all([fetch("/api/b"), fetch("/api/b")]).then(rs => Promise.all(rs.map(r => r.text()))).then(bs => { out.textContent = a + bs.join(""); }));
</script></body></html>`)
		case "/api/a", "/api/b":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.TrimPrefix(r.URL.Path, "/api/"))
		}
	}))
	r := b.Get(context.Background(), site+"/", renderOptions(&fetch.Render{NetworkIdle: true, IdleCap: 10 * time.Second, Timeout: 20 * time.Second}))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	if !strings.Contains(string(r.Body), `<p id="out">abb</p>`) {
		t.Errorf("the page did not get its answers: %s", r.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits["/api/a"] != 1 || hits["/api/b"] != 1 {
		t.Errorf("requests at the host: %v, want one for each URL", hits)
	}
	var urls []string
	for _, res := range r.Rendered.Resources {
		urls = append(urls, strings.TrimPrefix(res.URL, site))
	}
	if strings.Join(urls, " ") != "/api/a /api/b" {
		t.Errorf("resources %v, want each URL once, in order", urls)
	}
}
