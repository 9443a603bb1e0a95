package campaign

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func normalize(t *testing.T, doc string) (Spec, error) {
	t.Helper()
	s, err := ParseSpec([]byte(doc))
	if err != nil {
		return s, err
	}
	return s.Normalize()
}

func TestDefaults(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://127.0.0.1:8080/"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if *s.Limits.MaxDepth != DefaultMaxDepth || s.Limits.MaxBodyBytes != DefaultMaxBodyBytes ||
		s.Politeness.MaxConcurrencyPerHost != DefaultConcurrency || s.Retry.MaxAttempts != DefaultMaxAttempts ||
		s.Dispatch.BatchSize != DefaultBatchSize || s.Dispatch.HeartbeatTimeout.D() != 10*time.Second ||
		s.Scope.ShardBy != "host" || s.Politeness.UserAgent != DefaultUserAgent || s.Timeouts.Request.D() != 30*time.Second {
		t.Fatalf("defaults not applied: %+v", s)
	}
	// Defaults are a fixed point: normalising twice changes nothing.
	again, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Fatalf("second Normalize changed the spec:\n%s\n%s", a, b)
	}
	scope, err := s.CompileScope()
	if err != nil || len(scope.Hosts) != 1 || scope.Hosts[0] != "127.0.0.1:8080" {
		t.Fatalf("default scope = %+v, %v; want the seed host", scope, err)
	}
}

func TestMaxDepthZeroMeansSeedsOnly(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"limits":{"max_depth":0}}`)
	if err != nil || *s.Limits.MaxDepth != 0 {
		t.Fatalf("max_depth 0 became %v (%v)", s.Limits.MaxDepth, err)
	}
}

func TestDurationsAcceptStringsAndSeconds(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"politeness":{"min_delay":"250ms"},"retry":{"initial_interval":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s.Politeness.MinDelay.D() != 250*time.Millisecond || s.Retry.InitialInterval.D() != 2*time.Second {
		t.Fatalf("got %v and %v", s.Politeness.MinDelay, s.Retry.InitialInterval)
	}
}

// TestBadSpecsNameTheField is the contract operators see: every problem
// names its field.
func TestBadSpecsNameTheField(t *testing.T) {
	for _, tc := range []struct{ doc, field, problem string }{
		{`{}`, "spec.seeds", "at least one seed"},
		{`{"seeds":[]}`, "spec.seeds", "at least one seed"},
		{`{"seeds":["ftp://x/"]}`, "spec.seeds[0]", "not an http(s) URL"},
		{`{"seeds":["http://ok/","mailto:a@b"]}`, "spec.seeds[1]", "not an http(s) URL"},
		{`{"seeds":["http://a/"],"limits":{"max_pages":-5}}`, "spec.limits.max_pages", "must be >= 0, got -5"},
		{`{"seeds":["http://a/"],"limits":{"max_depth":-1}}`, "spec.limits.max_depth", "must be >= 0"},
		{`{"seeds":["http://a/"],"limits":{"max_pages":"ten"}}`, "spec.limits.max_pages", "want an integer"},
		{`{"seeds":"http://a/"}`, "spec.seeds", "want a list of string"},
		{`{"seed":["http://a/"]}`, "spec", `unknown field "seed"`},
		{`{"seeds":["http://a/"],"politeness":{"delay":"1s"}}`, "spec.politeness", `unknown field "delay"`},
		{`{"seeds":["http://a/"],"politeness":{"min_delay":"soon"}}`, "spec.politeness.min_delay", "want a duration"},
		{`{"seeds":["http://a/"],"scope":{"exclude":["("]}}`, "spec.scope.exclude[0]", "bad regular expression"},
		{`{"seeds":["http://a/"],"scope":{"shard_by":"path"}}`, "spec.scope.shard_by", `want "host" or "domain"`},
		{`{"seeds":["http://a/"],"retry":{"backoff_coefficient":0.5}}`, "spec.retry.backoff_coefficient", "must be 1..100"},
		{`{"seeds":["http://a/"],"nodes":["ok","bad id"]}`, "spec.nodes[1]", "may hold only"},
		{`{"seeds":["http://a/"],"dispatch":{"batch_size":100000}}`, "spec.dispatch.batch_size", "must be 1..5000"},
		{`[1,2]`, "spec", "want a JSON object"},
	} {
		_, err := normalize(t, tc.doc)
		if err == nil {
			t.Errorf("%s: no error", tc.doc)
			continue
		}
		if !strings.Contains(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%s:\n  error %q\n  want field %q with %q", tc.doc, err, tc.field, tc.problem)
		}
	}
}

func TestSeveralProblemsAreAllReported(t *testing.T) {
	_, err := normalize(t, `{"limits":{"max_pages":-1,"max_redirects":-2}}`)
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a FieldError", err)
	}
	for _, f := range []string{"spec.seeds", "spec.limits.max_pages", "spec.limits.max_redirects"} {
		if !strings.Contains(err.Error(), f+":") {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

// TestUnmarshalKeepsProblemForNormalize covers the path Temporal's payload
// converter takes: decoding never fails, Normalize reports.
func TestUnmarshalKeepsProblemForNormalize(t *testing.T) {
	var s Spec
	if err := json.Unmarshal([]byte(`{"seeds":["http://a/"],"limit":{}}`), &s); err != nil {
		t.Fatalf("Unmarshal failed: %v", err)
	}
	if _, err := s.Normalize(); err == nil || !strings.Contains(err.Error(), `spec: unknown field "limit"`) {
		t.Fatalf("Normalize = %v, want the unknown field", err)
	}
	// A spec round-tripped through JSON stays valid.
	good, err := normalize(t, `{"seeds":["http://a/"],"politeness":{"min_delay":"1s"}}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(good)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, err := back.Normalize(); err != nil {
		t.Fatalf("round-tripped spec %s is invalid: %v", b, err)
	}
}
