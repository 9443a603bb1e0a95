package workers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx/fxtest"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/metrics"
)

// TestNodeNeverFetchesItsOwnListener: a node allowed every private
// network (as on the dev stack) still refuses to fetch from its own
// listeners: metrics, bodies and batches, pprof.
func TestNodeNeverFetchesItsOwnListener(t *testing.T) {
	var cfg config.Config
	cfg.Node.AllowPrivateNetworks = true
	cfg.Node.MetricsAddr, cfg.Node.BodiesAddr, cfg.Node.PprofAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Node.Secret = config.NewSecret()
	hl, err := listenHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFetcher(cfg, hl)
	if err != nil {
		t.Fatal(err)
	}
	o := fetch.Options{UserAgent: "spiderpool-test", ConnectTimeout: time.Second, RequestTimeout: 2 * time.Second, MaxBodyBytes: 1 << 10}
	for _, l := range []net.Listener{hl.metrics, hl.bodies, hl.pprof} {
		defer l.Close()
		if r := f.Get(context.Background(), "http://"+l.Addr().String()+"/", o); !errors.Is(r.Err, fetch.ErrBlocked) {
			t.Errorf("fetching the node's own listener %s: err %v, want refused", l.Addr(), r.Err)
		}
	}
}

// TestBodiesOnlyWithTheSecret: page bodies and batches are served on
// --bodies-addr alone, to callers presenting the node secret (401 for any
// other); a node asked to serve them without a secret does not start; the
// metrics listener serves neither.
func TestBodiesOnlyWithTheSecret(t *testing.T) {
	t.Setenv(config.EnvNodeSecret, "")
	t.Setenv(config.EnvNodeSecretFile, "")
	var cfg config.Config
	cfg.Node.ID, cfg.Node.MetricsAddr, cfg.Node.BodiesAddr = "n1", "127.0.0.1:0", "127.0.0.1:0"
	if hl, err := listenHTTP(cfg); err == nil {
		hl.bodies.Close()
		hl.metrics.Close()
		t.Fatal("--bodies-addr without a node secret: the node started")
	}
	secret := config.NewSecret()
	t.Setenv(config.EnvNodeSecret, secret)
	hl := serveNode(t, cfg)
	ask := func(addr, path, auth string) int {
		t.Helper()
		method, body := http.MethodGet, io.Reader(nil)
		if path == activities.BodyPath {
			method, body = http.MethodPost, strings.NewReader("not JSON")
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, body)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bodies, metricsAddr := hl.bodies.Addr().String(), hl.metrics.Addr().String()
	// A request the handlers refuse before they ask the store (a POST of
	// tokens that is not JSON, a token that is not hex): 400 proves it got
	// past the secret.
	for _, path := range []string{activities.BodyPath, activities.BatchPath + "zz"} {
		for _, auth := range []string{"", "Bearer", "Bearer " + secret[:len(secret)-1], "Basic " + secret, "bearer " + secret} {
			if code := ask(bodies, path, auth); code != http.StatusUnauthorized {
				t.Errorf("GET %s with Authorization %q: %d, want 401", path, auth, code)
			}
		}
		if code := ask(bodies, path, "Bearer "+secret); code != http.StatusBadRequest {
			t.Errorf("GET %s with the secret: %d, want 400 (past the secret, a bad token)", path, code)
		}
		if code := ask(metricsAddr, path, "Bearer "+secret); code != http.StatusNotFound {
			t.Errorf("GET %s on the metrics listener: %d, want 404", path, code)
		}
	}
	if code := ask(metricsAddr, "/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", code)
	}
}

// TestPprofOnlyWhenAskedAndOnLoopback: the metrics listener serves no
// /debug/pprof (a profile or trace loads the CPU on request); --pprof
// serves it on a listener of its own, on 127.0.0.1 when no host is named.
func TestPprofOnlyWhenAskedAndOnLoopback(t *testing.T) {
	get := func(url string) int {
		t.Helper()
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var cfg config.Config
	cfg.Node.ID, cfg.Node.MetricsAddr = "n1", "127.0.0.1:0"
	hl := serveNode(t, cfg)
	if code := get("http://" + hl.metrics.Addr().String() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the metrics listener without --pprof: %d, want 404", code)
	}
	if hl.pprof != nil {
		t.Errorf("a pprof listener without --pprof: %s", hl.pprof.Addr())
	}
	cfg.Node.PprofAddr = ":0"
	hl = serveNode(t, cfg)
	if a := hl.pprof.Addr().(*net.TCPAddr); !a.IP.IsLoopback() {
		t.Errorf("--pprof :0 listens on %s, want loopback", a)
	}
	if code := get("http://" + hl.pprof.Addr().String() + "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("pprof with --pprof: %d, want 200", code)
	}
	if code := get("http://" + hl.metrics.Addr().String() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the metrics listener with --pprof: %d, want 404", code)
	}
}

// serveNode opens the node's listeners as cfg says and serves them (with
// no store: requests that reach it are refused before it is asked) until
// the test ends.
func serveNode(t *testing.T, cfg config.Config) httpListener {
	t.Helper()
	hl, err := listenHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New("n1")
	if err != nil {
		t.Fatal(err)
	}
	lc := fxtest.NewLifecycle(t)
	serveHTTP(lc, hl, nil, slog.New(slog.DiscardHandler), m)
	lc.RequireStart()
	t.Cleanup(lc.RequireStop)
	return hl
}
