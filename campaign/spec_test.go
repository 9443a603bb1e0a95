package campaign

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
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
		{`{"seeds":["http://a/"],"processors":[{"name":"p","task_queue":"q","activity":"a","bodies":"inlined"}]}`,
			"spec.processors[0].bodies", `want "inline" or "reference", got "inlined"`},
		{`{"seeds":["http://a/"],"processors":[{"name":"p","task_queue":"q","activity":"a","batch":"by-reference"}]}`,
			"spec.processors[0].batch", `want "inline" or "reference", got "by-reference"`},
		{`{"seeds":["http://a/"],"processors":[{"name":"p","task_queue":"q","activity":"a","unchanged":"latest"}]}`,
			"spec.processors[0].unchanged", `want "skip" or "last_version", got "latest"`},
		{`{"seeds":["http://a/"],"scope":{"priorities":[{"pattern":"(","priority":5}]}}`, "spec.scope.priorities[0].pattern", "want a regular expression"},
		{`{"seeds":["http://a/"],"scope":{"priorities":[{"pattern":"/news/","priority":5000}]}}`, "spec.scope.priorities[0].priority", "must be -1000..1000"},
		{`{"seeds":["http://a/"],"render":{}}`, "spec.render.hosts", "name the hosts"},
		{`{"seeds":["http://a/"],"render":{"hosts":["http://a/"]}}`, "spec.render.hosts[0]", "is not a host[:port]"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"include":["("]}}`, "spec.render.include[0]", "bad regular expression"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"wait":"idle"}}`, "spec.render.wait", `want "network_idle" or "load"`},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"scroll":{"steps":0.5}}}`, "spec.render.scroll.steps", "want an integer"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"scroll":{"steps":-1}}}`, "spec.render.scroll.steps", "must be 0..1000"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"tabs":65}}`, "spec.render.tabs", "must be 0..64"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"tabs":"two"}}`, "spec.render.tabs", "want an integer"},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"timout":"5s"}}`, "spec.render", `unknown field "timout"`},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"atuo":true}}`, "spec.render", `unknown field "atuo"`},
		{`{"seeds":["http://a/"],"render":{"hosts":["a"],"auto":"yes"}}`, "spec.render.auto", "want true or false"},
		{`{"seeds":["http://a/"],"recrawl":{"series":"s","min_intreval":"1h"}}`, "spec.recrawl", `unknown field "min_intreval"`},
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
	if err := json.Unmarshal([]byte(`{"seeds":["http://a/"],"limits":{"max_pages":"ten"}}`), &s); err != nil {
		t.Fatalf("Unmarshal failed: %v", err)
	}
	if _, err := s.Normalize(); err == nil || !strings.Contains(err.Error(), "spec.limits.max_pages: want an integer") {
		t.Fatalf("Normalize = %v, want the field of the wrong type", err)
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

// newerSpec is a spec as a newer release might write it: fields this one
// does not know, at the top and inside a known object.
const newerSpec = `{"seeds":["http://a/"],"crawl_budget":{"usd":5},
	"politeness":{"min_delay":"2s","new_knob":[1,2]},"limits":{"max_pages":7}}`

// TestPayloadFromNewerVersionRuns is the rolling-upgrade contract (issue 11,
// defect 10): a workflow input or activity payload written by a newer
// version, decoded by Temporal's data converter, runs here with the fields
// this version knows, and the others travel on unchanged.
func TestPayloadFromNewerVersionRuns(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	payload := &commonpb.Payload{
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)},
		Data:     []byte(newerSpec),
	}
	var s Spec
	if err := dc.FromPayload(payload, &s); err != nil {
		t.Fatalf("data converter: %v", err)
	}
	n, err := s.Normalize()
	if err != nil {
		t.Fatalf("a spec with fields of a newer version failed: %v", err)
	}
	if n.Politeness.MinDelay.D() != 2*time.Second || n.Limits.MaxPages != 7 || len(n.Seeds) != 1 {
		t.Fatalf("known fields lost: %+v", n)
	}
	if got, want := strings.Join(n.UnknownFields(), " "), "spec.crawl_budget spec.politeness.new_knob"; got != want {
		t.Fatalf("UnknownFields = %q, want %q", got, want)
	}

	// Passed on (stored, an activity's input, continue-as-new), the newer
	// fields are still there, where they were.
	out, err := dc.ToPayload(n)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		CrawlBudget map[string]int `json:"crawl_budget"`
		Politeness  struct {
			NewKnob  []int  `json:"new_knob"`
			MinDelay string `json:"min_delay"`
		} `json:"politeness"`
	}
	if err := json.Unmarshal(out.Data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CrawlBudget["usd"] != 5 || len(doc.Politeness.NewKnob) != 2 || doc.Politeness.MinDelay != "2s" {
		t.Fatalf("re-encoded spec lost the newer fields: %s", out.Data)
	}
	again, err := DecodeSpec(out.Data)
	if err != nil || !slices.Equal(again.UnknownFields(), n.UnknownFields()) {
		t.Fatalf("decoding the re-encoded spec: %v, unknown %v", err, again.UnknownFields())
	}
}

// TestPeopleStillGetTypoErrors: what a person types (the CLI reads it
// with ParseSpec) stays strict, while the same document from a program is
// accepted.
func TestPeopleStillGetTypoErrors(t *testing.T) {
	if _, err := ParseSpec([]byte(newerSpec)); err == nil ||
		!strings.Contains(err.Error(), `spec: unknown field "crawl_budget"`) ||
		!strings.Contains(err.Error(), `spec.politeness: unknown field "new_knob"`) {
		t.Fatalf("ParseSpec = %v, want both unknown fields named", err)
	}
	if _, err := DecodeSpec([]byte(newerSpec)); err != nil {
		t.Fatalf("DecodeSpec = %v", err)
	}
	if _, err := DecodeSpec([]byte(`{"seeds":["http://a/"],"retry":{"max_attempts":"3"}}`)); err == nil ||
		!strings.Contains(err.Error(), "spec.retry.max_attempts: want an integer") {
		t.Fatalf("DecodeSpec of a wrong type = %v, want it named", err)
	}
}

// TestUnchangedPagesKeepTheirLastVersionOnlyWhenAsked: a processor set to
// "last_version" keeps what it made of a page that did not change (or was
// not due), its include and exclude still applied; one left alone skips
// such pages, and its spec stays as written (a campaign started before the
// field existed replays the same activity inputs).
func TestUnchangedPagesKeepTheirLastVersionOnlyWhenAsked(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"processors":[
		{"name":"prices","task_queue":"q","activity":"a","unchanged":"last_version","exclude":["/cart"]},
		{"name":"news","task_queue":"q","activity":"a"},
		{"name":"said","task_queue":"q","activity":"a","unchanged":"skip"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{s.Processors[0].Unchanged, s.Processors[1].Unchanged, s.Processors[2].Unchanged}; !slices.Equal(got, []string{"last_version", "", "skip"}) {
		t.Fatalf("normalised unchanged = %q, want each as written", got)
	}
	filters, err := s.CompileFilters()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		filter int
		url    string
		want   bool
	}{
		{0, "http://a/p/1", true},
		{0, "http://a/cart", false},
		{1, "http://a/p/1", false},
		{2, "http://a/p/1", false},
	} {
		if got := filters[tc.filter].KeepsLastVersion(tc.url); got != tc.want {
			t.Errorf("%s keeps the last version of %s: %v, want %v", filters[tc.filter].Name, tc.url, got, tc.want)
		}
	}
}

// TestRenderDefaultsWorkOnAPlainSite: a render naming only its hosts
// waits for the network, caps a page at 30s, scrolls not at all, and
// matches its hosts whatever their case; no render renders nothing.
func TestRenderDefaultsWorkOnAPlainSite(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"render":{"hosts":["App.Example:8080"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Render
	if r.Wait != RenderWaitNetworkIdle || r.IdleCap.D() != 5*time.Second || r.Timeout.D() != 30*time.Second ||
		r.Scroll.Steps != 0 {
		t.Errorf("defaults: %+v", *r)
	}
	if !r.RendersHost("app.example:8080") || r.RendersHost("other:8080") {
		t.Errorf("hosts %v: app.example:8080 renders, other:8080 does not", r.Hosts)
	}
	if (&Render{Hosts: []string{"*"}}).RendersHost("any") != true {
		t.Error(`"*" renders every host`)
	}
	var none *Render
	if none.RendersHost("a") {
		t.Error("no render renders a host")
	}
}

// TestRenderAutoIsReadFromTheSpec: "auto" decodes (and round-trips), off
// unless set.
func TestRenderAutoIsReadFromTheSpec(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"render":{"hosts":["a"],"auto":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Render.Auto {
		t.Error(`"auto": true did not set Render.Auto`)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"auto":true`) {
		t.Errorf("the spec lost auto when encoded: %s", b)
	}
	if s, err := normalize(t, `{"seeds":["http://a/"],"render":{"hosts":["a"]}}`); err != nil || s.Render.Auto {
		t.Errorf("without auto: err %v, auto %v; want every page of a render host rendered", err, s.Render.Auto)
	}
}
