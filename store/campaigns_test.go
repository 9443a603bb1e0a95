package store_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestStoredSpecFromNewerVersion: during a rolling upgrade a node of a
// newer version stores a campaign's spec with fields this version does not
// know. This node still loads it (its fetches read it), and a spec it
// stores keeps those fields for the newer nodes.
func TestStoredSpecFromNewerVersion(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	newer := `{"seeds":["http://a.test/"],"future":{"on":true},"politeness":{"min_delay":"3s","new_knob":1}}`
	if _, err := s.Pool().Exec(ctx, `UPDATE campaigns SET spec = $2 WHERE key = $1`, key, newer); err != nil {
		t.Fatal(err)
	}
	spec, err := s.CampaignSpec(ctx, key)
	if err != nil {
		t.Fatalf("a spec a newer node stored: %v", err)
	}
	if spec.Politeness.MinDelay.D().Seconds() != 3 {
		t.Fatalf("min_delay = %v, want 3s", spec.Politeness.MinDelay)
	}
	if got := spec.UnknownFields(); !slices.Equal(got, []string{"spec.future", "spec.politeness.new_knob"}) {
		t.Fatalf("unknown fields %v", got)
	}

	// Stored again by this node (a campaign restarted under its ID), the
	// newer fields survive.
	if _, _, err := s.CreateCampaign(ctx, t.Name(), spec); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Future     map[string]bool `json:"future"`
		Politeness map[string]any  `json:"politeness"`
	}
	var raw []byte
	if err := s.Pool().QueryRow(ctx, `SELECT spec FROM campaigns WHERE key = $1`, key).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !doc.Future["on"] || doc.Politeness["new_knob"] != float64(1) {
		t.Fatalf("stored spec lost the newer fields: %s", raw)
	}
	if _, err := campaign.ParseSpec(raw); err == nil {
		t.Fatal("ParseSpec accepted unknown fields: a person's typo would go unnamed")
	}
}
