package render

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
)

// A campaign's renders wait for one of its own tabs (spec.render.tabs),
// while another campaign's render goes on to open its tab. The browser
// here cannot start: a render that got past the waits fails at once for
// that, one held by them ends with its context's deadline.
func TestACampaignRendersNoMoreAtOnceThanItsTabs(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	broken := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Path: broken, Plain: fetch.New(2, fetch.Guard{AllowPrivate: true}), Tabs: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	render := func(group string, wait time.Duration) fetch.Response {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return b.Get(ctx, s.URL+"/", pageOptions(&fetch.Render{Timeout: 30 * time.Second, Group: group, Tabs: 1}))
	}
	held := b.group("7", 1)
	held <- struct{}{} // campaign 7's one tab is taken

	if r := render("7", 300*time.Millisecond); !errors.Is(r.Err, context.DeadlineExceeded) || errors.Is(r.Err, fetch.ErrRender) {
		t.Errorf("campaign 7, its tab taken: err %v, want it to wait for the tab until its deadline (no ErrRender)", r.Err)
	}
	if len(b.tabs) != 0 {
		t.Errorf("%d of the node's tabs taken by a render that waits for its campaign's", len(b.tabs))
	}
	if r := render("8", time.Minute); r.Err == nil || errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("campaign 8: err %v, want it past the waits, failing for the browser", r.Err)
	}
	<-held
	if r := render("7", time.Minute); r.Err == nil || errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("campaign 7, its tab given back: err %v, want it past the waits, failing for the browser", r.Err)
	}
}
