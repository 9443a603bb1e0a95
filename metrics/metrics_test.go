package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCrawlMetricsAreServed(t *testing.T) {
	r, err := New("node-7")
	if err != nil {
		t.Fatal(err)
	}
	c := r.Crawl
	c.Response(200, 1000, 20*time.Millisecond)
	c.Response(503, 10, time.Millisecond)
	c.Response(0, 0, time.Second) // no answer
	c.Settled("fetched", 3)
	ended := c.BatchStarted()
	ended("completed")

	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`spiderpool_responses_total{class="2xx",node="node-7"} 1`,
		`spiderpool_responses_total{class="5xx",node="node-7"} 1`,
		`spiderpool_responses_total{class="error",node="node-7"} 1`,
		`spiderpool_response_bytes_total{node="node-7"} 1010`,
		`spiderpool_urls_total{node="node-7",state="fetched"} 3`,
		`spiderpool_batches_total{node="node-7",outcome="completed"} 1`,
		`spiderpool_batches_in_flight{node="node-7"} 0`,
		`spiderpool_fetch_duration_seconds_count{node="node-7"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestNilCrawlRecordsNothing(t *testing.T) {
	var c *Crawl
	c.Response(200, 1, time.Millisecond)
	c.HostWait(time.Second)
	c.LeaseAge(time.Second)
	c.Settled("fetched", 1)
	c.Discovered(1)
	c.BatchStarted()("completed")
	c.RequestStarted()()
}

// TestSDKLatenciesHaveMillisecondBuckets: a 3 ms workflow task lands in a
// bucket of 5 ms, not in OpenTelemetry's default first bucket of 5 s,
// where every quantile read 2.5 s.
func TestSDKLatenciesHaveMillisecondBuckets(t *testing.T) {
	r, err := New("node-7")
	if err != nil {
		t.Fatal(err)
	}
	r.Temporal.Timer("temporal_workflow_task_execution_latency").Record(3 * time.Millisecond)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var bucket string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "temporal_workflow_task_execution_latency_seconds_bucket") && strings.Contains(line, `le="0.005"`) {
			bucket = line
		}
	}
	if !strings.HasSuffix(bucket, " 1") {
		t.Errorf("the 5 ms bucket of the SDK's workflow task latency is %q, want a count of 1", bucket)
	}
}
