package crawler

import (
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

// A render's fetch options are the spec's: auto among them, so that the
// node renders only the script shells of a render host.
func TestRenderOptionsCarryTheSpec(t *testing.T) {
	rr, err := compileRender(&campaign.Render{
		Hosts: []string{"app.example"}, Include: []string{"/app/"}, Auto: true, Wait: campaign.RenderWaitNetworkIdle,
		IdleCap: campaign.Duration(time.Second), Timeout: campaign.Duration(9 * time.Second),
		Scroll: campaign.Scroll{Steps: 3, Wait: campaign.Duration(2 * time.Second)}, Tabs: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rr.renders("app.example", "http://app.example/app/x") || rr.renders("app.example", "http://app.example/doc") || rr.renders("other", "http://other/app/") {
		t.Error("renders: want the render host's pages that match include, and no others")
	}
	o := rr.options(7, nil)
	if !o.Auto || !o.NetworkIdle || o.IdleCap != time.Second || o.Timeout != 9*time.Second || o.ScrollSteps != 3 || o.ScrollWait != 2*time.Second ||
		o.Group != "7" || o.Tabs != 1 {
		t.Errorf("options %+v do not carry the spec", *o)
	}
	if rr, _ := compileRender(&campaign.Render{Hosts: []string{"*"}}); rr.options(7, nil).Auto {
		t.Error("a spec without auto renders every page of its hosts")
	}
}
