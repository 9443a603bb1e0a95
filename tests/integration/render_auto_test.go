package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestRenderAutoRendersOnlyScriptShells: a render host with auto and no
// include. The app's routes are script shells and render; its docs,
// items and server-rendered articles are not, and are kept as fetched:
// the app's script is loaded once per route, the articles' script (which
// only a browser would run) never, and the crawl finds every page, each
// requested once.
func TestRenderAutoRendersOnlyScriptShells(t *testing.T) {
	spa := &synthweb.SPA{Views: 2, Images: 1, Items: 20, Articles: 3, NoTraps: true}
	web := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 1, Listen: "127.0.0.2",
		Custom: map[int]map[string]http.HandlerFunc{0: spa.Site()}})
	base := "http://" + web.Hosts()[0]
	s := harness.NewStack(t)
	s.StartNodeWith("browser", 1, func(c *config.Config) { c.Node.Browser = "auto" })

	spec := renderSpec(web)
	spec.Render.Include = nil
	spec.Render.Auto = true
	spec.Render.Scroll = campaign.Scroll{Steps: 5, Wait: campaign.Duration(time.Second)}
	id := "render-auto-" + s.Name
	sum := harness.RunCampaign(t, s, id, spec, 4*time.Minute)

	fr := campaignFrontier(t, s, id)
	hits := web.Hits()
	for _, p := range spa.Pages() {
		if r := fr[base+p]; r.state != "fetched" {
			t.Errorf("%s: %+v, want fetched", p, r)
		}
		if n := hits[base+p]; n != 1 {
			t.Errorf("%s requested %d times, want once", p, n)
		}
	}
	if len(fr) != len(spa.Pages()) {
		t.Errorf("the crawl found %d URLs, want the app's %d pages", len(fr), len(spa.Pages()))
	}
	routes := 2 + spa.Views // the home, the feed, the views: the script shells
	rendered := hits[base+synthweb.SPARoot+"app.js"]
	if rendered != routes {
		t.Errorf("app.js loaded %d times, want once by each of the %d script shells", rendered, routes)
	}
	if n := hits[base+synthweb.SPAEnhance]; n != 0 {
		t.Errorf("the articles' script loaded %d times: a server-rendered article was rendered", n)
	}
	t.Logf("auto: %d pages fetched, %d rendered (app.js loads), articles' script %d loads, in %.1fs",
		sum.Fetched, rendered, hits[base+synthweb.SPAEnhance], sum.Seconds)
}
