package workers

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/fx/fxtest"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/metrics"
)

// TestNodeNeverFetchesItsOwnListener: a node allowed every private
// network (as on the dev stack) still refuses to fetch from its own
// --metrics-addr listener, where its bodies, batches and pprof are.
func TestNodeNeverFetchesItsOwnListener(t *testing.T) {
	var cfg config.Config
	cfg.Node.AllowPrivateNetworks = true
	cfg.Node.MetricsAddr = "127.0.0.1:0"
	hl, err := listenHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.l.Close()
	f, err := newFetcher(cfg, hl)
	if err != nil {
		t.Fatal(err)
	}
	o := fetch.Options{UserAgent: "spiderpool-test", ConnectTimeout: time.Second, RequestTimeout: 2 * time.Second, MaxBodyBytes: 1 << 10}
	if r := f.Get(context.Background(), "http://"+hl.l.Addr().String()+"/metrics", o); !errors.Is(r.Err, fetch.ErrBlocked) {
		t.Fatalf("fetching the node's own listener: err %v, want refused", r.Err)
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
	start := func(cfg config.Config) httpListener {
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
	var cfg config.Config
	cfg.Node.ID, cfg.Node.MetricsAddr = "n1", "127.0.0.1:0"
	hl := start(cfg)
	if code := get("http://" + hl.l.Addr().String() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the metrics listener without --pprof: %d, want 404", code)
	}
	if hl.pprof != nil {
		t.Errorf("a pprof listener without --pprof: %s", hl.pprof.Addr())
	}
	cfg.Node.PprofAddr = ":0"
	hl = start(cfg)
	if a := hl.pprof.Addr().(*net.TCPAddr); !a.IP.IsLoopback() {
		t.Errorf("--pprof :0 listens on %s, want loopback", a)
	}
	if code := get("http://" + hl.pprof.Addr().String() + "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("pprof with --pprof: %d, want 200", code)
	}
	if code := get("http://" + hl.l.Addr().String() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the metrics listener with --pprof: %d, want 404", code)
	}
}
