// Package metrics owns what a node exports to Prometheus: the crawl
// metrics the fetch activities record, and the Temporal SDK's own metrics
// (through its OpenTelemetry handler), on one registry served at /metrics.
package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// Crawl are the crawl metrics of one node. The zero value is not usable;
// a nil *Crawl is, and records nothing (tests, tools).
type Crawl struct {
	responses    *prometheus.CounterVec
	bytes        prometheus.Counter
	fetchSeconds prometheus.Histogram
	hostWait     prometheus.Histogram
	leaseAge     prometheus.Histogram
	settled      *prometheus.CounterVec
	discovered   prometheus.Counter
	batches      *prometheus.CounterVec
	inflight     prometheus.Gauge
	requests     prometheus.Gauge
}

// Registry is a node's metrics: crawl, SDK, and the Go runtime's.
type Registry struct {
	reg   *prometheus.Registry
	Crawl *Crawl
	// Temporal is the SDK metrics handler, for client.Options.
	Temporal client.MetricsHandler
}

// New makes a node's registry; node labels every series.
func New(node string) (*Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{"node": node}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "spiderpool", Name: name, Help: help, ConstLabels: labels}
	}
	h := func(name, help string, buckets []float64) prometheus.HistogramOpts {
		o := f(name, help)
		return prometheus.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets}
	}
	c := &Crawl{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts(f("responses_total",
			"HTTP requests for pages by outcome: status class 2xx..5xx, or error when no response came")), []string{"class"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts(f("response_bytes_total",
			"Body bytes read, after decompression"))),
		fetchSeconds: prometheus.NewHistogram(h("fetch_duration_seconds",
			"Time from request to the end of the body", prometheus.ExponentialBuckets(0.001, 2.5, 12))),
		hostWait: prometheus.NewHistogram(h("host_wait_seconds",
			"Time a URL waited for its host's politeness turn (delay, concurrency, another node's claim)",
			prometheus.ExponentialBuckets(0.001, 3, 12))),
		leaseAge: prometheus.NewHistogram(h("lease_age_seconds",
			"Age of a URL's lease when this node's batch claimed it: time in the workflow and task queue",
			prometheus.ExponentialBuckets(0.01, 2.5, 12))),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts(f("urls_total",
			"URLs committed by state: fetched, failed, excluded, or retry (back to pending)")), []string{"state"}),
		discovered: prometheus.NewCounter(prometheus.CounterOpts(f("links_discovered_total",
			"New URLs this node added to frontiers"))),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts(f("batches_total",
			"Fetch batches by how they ended: completed, failed, cancelled")), []string{"outcome"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts(f("batches_in_flight", "Fetch batches running"))),
		requests: prometheus.NewGauge(prometheus.GaugeOpts(f("requests_in_flight", "HTTP requests running"))),
	}
	reg.MustRegister(c.responses, c.bytes, c.fetchSeconds, c.hostWait, c.leaseAge, c.settled, c.discovered,
		c.batches, c.inflight, c.requests)

	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// The SDK records latencies in seconds, and OpenTelemetry's default
	// buckets (0, 5, 10, 25, ... 10000) put every workflow task and lease
	// in the first: the dashboard's quantiles then read 2.5 s whatever
	// they were. These span a millisecond to a minute.
	seconds := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}})
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(seconds)).Meter("temporal-sdk")
	return &Registry{
		reg:      reg,
		Crawl:    c,
		Temporal: temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{Meter: meter}),
	}, nil
}

// latencyBuckets bound the SDK's latency histograms, in seconds.
var latencyBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}

// Handler serves the registry in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// Response records one HTTP request: status 0 is a request that got no
// response.
func (c *Crawl) Response(status int, bytes int64, took time.Duration) {
	if c == nil {
		return
	}
	class := "error"
	if status >= 100 && status < 600 {
		class = strconv.Itoa(status/100) + "xx"
	}
	c.responses.WithLabelValues(class).Inc()
	c.bytes.Add(float64(bytes))
	c.fetchSeconds.Observe(took.Seconds())
}

// HostWait records how long a URL waited for its host's turn.
func (c *Crawl) HostWait(d time.Duration) {
	if c != nil {
		c.hostWait.Observe(d.Seconds())
	}
}

// LeaseAge records a claimed URL's lease age.
func (c *Crawl) LeaseAge(d time.Duration) {
	if c != nil {
		c.leaseAge.Observe(d.Seconds())
	}
}

// Settled records n URLs committed in state.
func (c *Crawl) Settled(state string, n int) {
	if c != nil && n > 0 {
		c.settled.WithLabelValues(state).Add(float64(n))
	}
}

// Discovered records n new URLs.
func (c *Crawl) Discovered(n int) {
	if c != nil && n > 0 {
		c.discovered.Add(float64(n))
	}
}

// BatchStarted marks a batch running; call the returned func with its
// outcome when it ends.
func (c *Crawl) BatchStarted() func(outcome string) {
	if c == nil {
		return func(string) {}
	}
	c.inflight.Inc()
	return func(outcome string) {
		c.inflight.Dec()
		c.batches.WithLabelValues(outcome).Inc()
	}
}

// RequestStarted marks a request running until the returned func is
// called.
func (c *Crawl) RequestStarted() func() {
	if c == nil {
		return func() {}
	}
	c.requests.Inc()
	return c.requests.Dec
}
