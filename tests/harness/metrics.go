package harness

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeMetrics reads a node's /metrics at addr (host:port) in the
// Prometheus text format, by metric name.
func ScrapeMetrics(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	// A bounded client: the default one would wait forever on a node
	// that accepted the scrape and never answered.
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// MetricSum adds the values of a family's series whose labels include
// want: a counter's or gauge's value, a histogram's count. A nil family
// sums to 0.
func MetricSum(f *dto.MetricFamily, want map[string]string) float64 {
	if f == nil {
		return 0
	}
	var n float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			n += m.GetCounter().GetValue()
		case m.Histogram != nil:
			n += float64(m.GetHistogram().GetSampleCount())
		case m.Gauge != nil:
			n += m.GetGauge().GetValue()
		}
	}
	return n
}

// hasLabels says whether the series carries every label of want.
func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
