package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// attrEvery spaces counter upserts: each is an event in history, and the
// Web UI needs no finer grain. A status change is upserted at once.
const attrEvery = 10 * time.Second

// published is what the search attributes last said.
type published struct {
	status          string
	fetched, failed int64
	at              time.Time
}

// campaignStatus is the CampaignStatus of a campaign still going.
func (d *dispatcher) campaignStatus() string {
	if d.paused {
		return campaign.StatusPaused
	}
	return campaign.StatusRunning
}

// progress shows the campaign's state where operators look: the Web UI's
// current details (every loop turn: they cost no history) and the search
// attributes (when changed, see attrEvery). final upserts the counters
// whatever the time since the last.
func (d *dispatcher) progress(ctx workflow.Context, status string, fetched, failed int64, final bool) {
	workflow.SetCurrentDetails(ctx, d.details(status))
	if len(d.attrs) == 0 {
		return
	}
	now := workflow.Now(ctx)
	p := d.pub
	countersMoved := fetched != p.fetched || failed != p.failed
	if status == p.status && (!countersMoved || !final && now.Sub(p.at) < attrEvery) {
		return
	}
	var ups []temporal.SearchAttributeUpdate
	for _, name := range d.attrs {
		switch name {
		case campaign.AttrStatus:
			ups = append(ups, temporal.NewSearchAttributeKeyKeyword(name).ValueSet(status))
		case campaign.AttrFetched:
			ups = append(ups, temporal.NewSearchAttributeKeyInt64(name).ValueSet(fetched))
		case campaign.AttrFailed:
			ups = append(ups, temporal.NewSearchAttributeKeyInt64(name).ValueSet(failed))
		}
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, ups...); err != nil {
		// Only a malformed update fails here; the campaign goes on without.
		d.log.Warn("upserting search attributes failed; not trying again", "error", err)
		d.attrs = nil
		return
	}
	d.pub = published{status: status, fetched: fetched, failed: failed, at: now}
}

// details is the Markdown the Web UI shows as the workflow's current
// details.
func (d *dispatcher) details(status string) string {
	c := d.counters
	var b strings.Builder
	fmt.Fprintf(&b, "**%s** (%s), run %d\n\n", status, d.state, d.run)
	fmt.Fprintf(&b, "fetched %d · failed %d · excluded %d · discovered %d\n\n",
		c.Fetched, c.Failed, c.Excluded, c.Discovered)
	fmt.Fprintf(&b, "batches routed %d · URLs leased %d\n\n", c.Batches, c.Leased)
	if n := d.lastLease.RenderWaiting; n > 0 {
		// Details are no command: replay ignores what they say.
		fmt.Fprintf(&b, "**waiting for a browser node**: %d hosts render (spec.render) and no node of the ring has a browser; start one with `--browser`\n\n", n)
	}
	states := map[string]int{}
	for i, id := range d.order {
		n := d.nodes[id]
		states[n.state()]++
		if i < detailNodes {
			fmt.Fprintf(&b, "- %s: %s, weight %g, fetched %d, in flight %d URLs\n",
				n.id, n.state(), n.effectiveWeight(), n.fetched, n.inflightN)
		}
	}
	if len(d.order) > detailNodes {
		fmt.Fprintf(&b, "- and %d more (%d nodes: %d active, %d draining, %d drained, %d dead; `campaign status` lists them all)\n",
			len(d.order)-detailNodes, len(d.order), states[campaign.NodeActive], states[campaign.NodeDraining],
			states[campaign.NodeDrained], states[campaign.NodeDead])
	}
	if len(d.procs) > 0 {
		b.WriteString("\nprocessors:\n")
	}
	for _, p := range d.procs {
		fmt.Fprintf(&b, "- %s (%s on %s): processed %d · items %d · failed %d · waiting %d · batches in flight %d\n",
			p.spec.Name, p.spec.Activity, p.spec.TaskQueue, p.counters.Processed, p.counters.Items,
			p.counters.Failed, p.counters.Waiting, p.counters.InFlight)
	}
	return b.String()
}
