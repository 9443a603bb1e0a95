package processor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
)

// bodyServer serves bodies as a node does: POST a JSON array of tokens for
// framed bodies, GET /<token> for one. wrong names a token whose bulk
// answer is corrupted; broken makes every POST fail.
type bodyServer struct {
	*httptest.Server
	bodies        map[string]string
	posts, gets   atomic.Int32
	wrong, broken string
}

func newBodyServer(t *testing.T, bodies map[string]string) *bodyServer {
	b := &bodyServer{bodies: bodies}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b.posts.Add(1)
			if b.broken != "" {
				http.Error(w, b.broken, http.StatusServiceUnavailable)
				return
			}
			var tokens []string
			if err := json.NewDecoder(r.Body).Decode(&tokens); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, tok := range tokens {
				body, ok := b.bodies[tok]
				switch {
				case !ok:
					fmt.Fprintf(w, "%s -1\n", tok)
				case tok == b.wrong:
					fmt.Fprintf(w, "%s %d\n%s", tok, len(body), strings.ToUpper(body))
				default:
					fmt.Fprintf(w, "%s %d\n%s", tok, len(body), body)
				}
			}
			return
		}
		b.gets.Add(1)
		body, ok := b.bodies[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(b.Close)
	return b
}

// refBatch is a request whose pages all have their bodies at servers.
func refBatch(bodies map[string]string, tokens []string, servers ...*bodyServer) campaign.ProcessRequest {
	var req campaign.ProcessRequest
	for _, s := range servers {
		req.BodyServers = append(req.BodyServers, s.URL+"/")
	}
	for _, tok := range tokens {
		ref := &campaign.BodyRef{Token: tok, SHA256: sha256Hex([]byte(bodies[tok]))}
		for _, s := range servers {
			ref.URLs = append(ref.URLs, s.URL+"/"+tok)
		}
		req.Pages = append(req.Pages, campaign.ProcessPage{Key: tok, BodyRef: ref, BodyLength: int64(len(bodies[tok]))})
	}
	return req
}

// seen runs a processor that records the body of each page by key.
func seen(t *testing.T, req campaign.ProcessRequest) map[string]string {
	t.Helper()
	got := map[string]string{}
	p := New("t").Logger(slog.New(slog.DiscardHandler)).OnPage(func(pg *Page) error {
		got[pg.Key] = string(pg.Body)
		return nil
	})
	if _, err := p.Process(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestBodiesByReferenceComeInOneRequest(t *testing.T) {
	bodies := map[string]string{"a1": "first", "b2": "second", "c3": "third"}
	tokens := []string{"a1", "b2", "c3"}
	cases := []struct {
		name                string
		wrong, broken       string
		posts, gets         int32 // at the first server
		secondPosts         int32 // at a second server
		secondServerPresent bool
	}{
		{name: "one POST for the batch", posts: 1},
		{name: "a corrupt body is got again by GET", wrong: "b2", posts: 1, gets: 1},
		{name: "a failing server gives way to the next", broken: "down", posts: 1, secondPosts: 1, secondServerPresent: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first := newBodyServer(t, bodies)
			first.wrong, first.broken = c.wrong, c.broken
			servers := []*bodyServer{first}
			if c.secondServerPresent {
				servers = append(servers, newBodyServer(t, bodies))
			}
			got := seen(t, refBatch(bodies, tokens, servers...))
			for _, tok := range tokens {
				if got[tok] != bodies[tok] {
					t.Errorf("page %s had body %q, want %q", tok, got[tok], bodies[tok])
				}
			}
			if n := first.posts.Load(); n != c.posts {
				t.Errorf("%d POSTs to the first server, want %d", n, c.posts)
			}
			if n := first.gets.Load(); n != c.gets {
				t.Errorf("%d GETs to the first server, want %d", n, c.gets)
			}
			if c.secondServerPresent {
				if n := servers[1].posts.Load(); n != c.secondPosts {
					t.Errorf("%d POSTs to the second server, want %d", n, c.secondPosts)
				}
				if n := servers[1].gets.Load(); n != 0 {
					t.Errorf("%d GETs to the second server, want none", n)
				}
			}
		})
	}
}

func TestReadBodiesRejectsBadFrames(t *testing.T) {
	for _, in := range []string{"a1 5\nabc", "a1 x\n", "a1\n", "a1 -2\n", ""} {
		if _, err := readBodies(bufioReader(in), 1); err == nil {
			t.Errorf("%q: read without an error", in)
		}
	}
	got, err := readBodies(bufioReader("a1 -1\nb2 3\nxyz"), 2)
	if err != nil || len(got) != 1 || string(got["b2"]) != "xyz" {
		t.Errorf("got %q, %v: want only b2 = xyz", got, err)
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// TestBatchByReference: a request that names its batch gets the pages
// from the first node that serves the batch, then their bodies in one
// request; a node that no longer serves it gives way to the next.
func TestBatchByReference(t *testing.T) {
	bodies := map[string]string{"a1": "first", "b2": "second"}
	tokens := []string{"a1", "b2"}
	bs := newBodyServer(t, bodies)
	full := refBatch(bodies, tokens, bs)
	var gone, served atomic.Int32
	missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gone.Add(1)
		http.Error(w, "no such batch", http.StatusNotFound)
	}))
	t.Cleanup(missing.Close)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path != "/v1/batches/bt" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(full)
	}))
	t.Cleanup(node.Close)
	req := campaign.ProcessRequest{Batch: &campaign.BatchRef{Token: "bt", Pages: 2,
		URLs: []string{missing.URL + "/v1/batches/bt", node.URL + "/v1/batches/bt"}}}
	got := seen(t, req)
	for _, tok := range tokens {
		if got[tok] != bodies[tok] {
			t.Errorf("page %s had body %q, want %q", tok, got[tok], bodies[tok])
		}
	}
	if gone.Load() != 1 || served.Load() != 1 || bs.posts.Load() != 1 || bs.gets.Load() != 0 {
		t.Errorf("%d GETs to the node without the batch, %d to the one with it, %d POSTs and %d GETs of bodies: want 1, 1, 1, 0",
			gone.Load(), served.Load(), bs.posts.Load(), bs.gets.Load())
	}

	short := req
	short.Batch = &campaign.BatchRef{Token: "bt", Pages: 3, URLs: []string{node.URL + "/v1/batches/bt"}}
	p := New("t").Logger(slog.New(slog.DiscardHandler)).OnPage(func(*Page) error { return nil })
	if _, err := p.Process(context.Background(), short); err == nil || !strings.Contains(err.Error(), "2 pages, want 3") {
		t.Errorf("a batch served with fewer pages than its reference counts: %v, want an error saying so", err)
	}
}

// TestBatchWithBodiesAppended: a node that knows ?bodies=appended answers
// with the pages as JSON and then the bodies of those without a body_ref,
// as bytes, in page order; the processor puts each in its page, gets the
// others by reference, and fails a batch whose bodies are cut short.
func TestBatchWithBodiesAppended(t *testing.T) {
	bs := newBodyServer(t, map[string]string{"b2": "by reference"})
	full := refBatch(bs.bodies, []string{"b2"}, bs)
	inline := map[string]string{"a": "first", "c": "", "d": "fourth\nwith a newline"}
	full.Pages = append([]campaign.ProcessPage{{Key: "a", BodyLength: 5}}, full.Pages...)
	full.Pages = append(full.Pages, campaign.ProcessPage{Key: "c"}, campaign.ProcessPage{Key: "d", BodyLength: int64(len(inline["d"]))})
	var cut atomic.Bool
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("bodies") != "appended" {
			http.Error(w, "want ?bodies=appended", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", campaign.AppendedBatchType)
		json.NewEncoder(w).Encode(full)
		bodies := inline["a"] + inline["d"]
		if cut.Load() {
			bodies = bodies[:len(bodies)-1]
		}
		io.WriteString(w, bodies)
	}))
	t.Cleanup(node.Close)
	req := campaign.ProcessRequest{Batch: &campaign.BatchRef{Token: "bt", Pages: 4, URLs: []string{node.URL + "/v1/batches/bt"}}}
	got := seen(t, req)
	want := map[string]string{"a": "first", "b2": "by reference", "c": "", "d": inline["d"]}
	for k, body := range want {
		if b, ok := got[k]; !ok || b != body {
			t.Errorf("page %s had body %q (seen %v), want %q", k, b, ok, body)
		}
	}
	cut.Store(true)
	p := New("t").Logger(slog.New(slog.DiscardHandler)).OnPage(func(*Page) error { return nil })
	if _, err := p.Process(context.Background(), req); err == nil || !strings.Contains(err.Error(), "bodies") {
		t.Errorf("a batch whose appended bodies were cut short: %v, want an error saying so", err)
	}
}

// TestProcessorPresentsTheNodeSecret: a processor gets bodies from a node
// that wants the node secret (activities.RequireSecret) when it has the
// secret, from the environment or NodeSecret, and without it fails with an
// error that says what to set.
func TestProcessorPresentsTheNodeSecret(t *testing.T) {
	secret := config.NewSecret()
	bodies := map[string]string{"a1": "first", "b2": "second"}
	b := newBodyServer(t, bodies)
	b.Config.Handler = activities.RequireSecret(secret, b.Config.Handler)
	req := refBatch(bodies, []string{"a1", "b2"}, b)

	t.Setenv(config.EnvNodeSecret, secret)
	if got := seen(t, req); got["a1"] != "first" || got["b2"] != "second" {
		t.Errorf("with the secret from %s: bodies %q", config.EnvNodeSecret, got)
	}
	t.Setenv(config.EnvNodeSecret, "")
	p := New("t").Logger(slog.New(slog.DiscardHandler)).OnPage(func(*Page) error { return nil })
	_, err := p.Process(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), config.EnvNodeSecret) {
		t.Errorf("without a secret: %v, want an error naming %s", err, config.EnvNodeSecret)
	}
	if _, err := p.NodeSecret(secret).Process(context.Background(), req); err != nil {
		t.Errorf("with NodeSecret: %v", err)
	}
}
