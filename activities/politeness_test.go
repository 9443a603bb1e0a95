package activities

import (
	"context"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
)

// TestAdaptiveSlowing: a run of 5xx slows a host, a few do not, and
// success brings it back to full speed.
func TestAdaptiveSlowing(t *testing.T) {
	g := &gate{slots: make(chan struct{}, 1)}
	ctx := context.Background()
	ok, fail := &fetch.Response{Status: 200}, &fetch.Response{Status: 502}
	for i := range 10 {
		g.observe(ctx, ok, time.Minute)
		if i%4 == 0 {
			g.observe(ctx, fail, time.Minute)
		}
	}
	if g.extra != 0 {
		t.Fatalf("scattered errors slowed the host by %v", g.extra)
	}
	for range 20 {
		g.slowed = time.Time{} // as if a second had passed between answers
		g.observe(ctx, fail, time.Minute)
	}
	if g.extra < time.Second || g.extra > maxBackoff {
		t.Fatalf("after 20 errors in a row the extra delay is %v", g.extra)
	}
	for range 30 {
		g.observe(ctx, ok, time.Minute)
	}
	if g.extra != 0 {
		t.Fatalf("after recovery the extra delay is still %v", g.extra)
	}
}

func TestSpacingHasMargin(t *testing.T) {
	if spacing(0, 0) != 0 {
		t.Fatal("no delay must mean no spacing")
	}
	if got := spacing(time.Second, 0); got < time.Second+30*time.Millisecond {
		t.Fatalf("spacing(1s) = %v, want a margin over a second", got)
	}
}
