package integration

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// collector is an OTLP/gRPC trace collector that counts spans by name.
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]int
}

func (c *collector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans[sp.GetName()]++
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// TestTracesReachCollector: a node with --otlp-endpoint sends the Temporal
// SDK interceptor's workflow and activity spans to the collector, and a
// span for each batch it took from Postgres (not an activity in a pool
// run).
func TestTracesReachCollector(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{spans: map[string]int{}}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, col)
	go srv.Serve(l) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)

	web := harness.StartWeb(t, synthweb.Config{Hosts: 2, Pages: 60, LinksPerPage: 4, Seed: 3})
	s := harness.NewStack(t)
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.OTLPEndpoint = "http://" + l.Addr().String() })
	sum := harness.RunCampaign(t, s, "traced-"+s.Name, loopbackSpec(web), 2*time.Minute)
	assertExactlyOnce(t, s, web, sum)
	s.StopNode(node) // flushes the batched spans

	col.mu.Lock()
	defer col.mu.Unlock()
	for _, want := range []string{"RunWorkflow:CrawlCampaign", "RunActivity:LeaseHosts", "FetchBatch"} {
		if col.spans[want] == 0 {
			t.Errorf("no %q span reached the collector; got %v", want, col.spans)
		}
	}
	t.Logf("spans received: %v", col.spans)
}
