package workers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/fetch"
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
