package control

import (
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

func TestRecurrenceValidate(t *testing.T) {
	for _, tc := range []struct {
		r     Recurrence
		wants []string // each in the error; none: valid
	}{
		{Recurrence{Every: time.Hour}, nil},
		{Recurrence{Cron: "0 3 * * *"}, nil},
		{Recurrence{Cron: "*/15 8-18 * jan-mar,dec mon-fri"}, nil},
		{Recurrence{Cron: "0 0 3 1 * * 2027"}, nil},
		{Recurrence{Cron: "0 3 * * * 2030"}, nil},
		{Recurrence{Cron: "CRON_TZ=Europe/Paris 30 4 * * 7"}, nil},
		{Recurrence{Cron: "@daily"}, nil},
		{Recurrence{Cron: "@every 6h/30m"}, nil},
		{Recurrence{}, []string{"--every or --cron: one is required"}},
		{Recurrence{Every: time.Hour, Cron: "@daily"}, []string{"give one, not both"}},
		{Recurrence{Every: time.Millisecond}, []string{"--every: must be at least 1s, got 1ms"}},
		{Recurrence{Cron: "0 3 * *"}, []string{"want 5 fields", "got 4"}},
		{Recurrence{Cron: "61 25 * * *"}, []string{`minute "61": 61 is out of range 0-59`, `hour "25": 25 is out of range 0-23`}},
		{Recurrence{Cron: "0 3 0 ja noday"}, []string{`day of month "0": 0 is out of range 1-31`,
			`month "ja": "ja" is neither a number nor a name (jan..dec)`, `day of week "noday"`}},
		{Recurrence{Cron: "*/0 5-2 * * *"}, []string{`step "0"`, "range 5-2 ends before it starts"}},
		{Recurrence{Cron: "@fortnightly"}, []string{"unknown @fortnightly"}},
		{Recurrence{Cron: "@every soon"}, []string{`@every wants a duration like 6h, got "soon"`}},
	} {
		err := tc.r.Validate()
		switch {
		case len(tc.wants) == 0 && err != nil:
			t.Errorf("%+v: %v, want valid", tc.r, err)
		case len(tc.wants) > 0 && err == nil:
			t.Errorf("%+v: valid, want %q", tc.r, tc.wants)
		}
		for _, want := range tc.wants {
			if err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: %q lacks %q", tc.r, err, want)
			}
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 90 * time.Minute: "1h30m", 30 * time.Minute: "30m", 24 * time.Hour: "24h",
		90 * time.Second: "1m30s", time.Hour + time.Second: "1h0m1s", 45 * time.Second: "45s",
	} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestInSeries: a schedule's runs are one series, named after the
// schedule unless the spec names its own; the caller's spec is not
// changed.
func TestInSeries(t *testing.T) {
	if got := InSeries(campaign.Spec{}, "nightly").Recrawl; got == nil || got.Series != "nightly" {
		t.Errorf("no recrawl: got %+v, want series nightly", got)
	}
	own := &campaign.Recrawl{MinInterval: campaign.Duration(2 * time.Hour)}
	got := InSeries(campaign.Spec{Recrawl: own}, "nightly").Recrawl
	if got.Series != "nightly" || got.MinInterval != own.MinInterval {
		t.Errorf("recrawl without a series: got %+v, want series nightly and the spec's bounds", got)
	}
	if own.Series != "" {
		t.Errorf("InSeries changed the caller's recrawl: %+v", own)
	}
	named := campaign.Spec{Recrawl: &campaign.Recrawl{Series: "docs"}}
	if got := InSeries(named, "nightly").Recrawl.Series; got != "docs" {
		t.Errorf("series named in the spec: got %q, want docs", got)
	}
}
