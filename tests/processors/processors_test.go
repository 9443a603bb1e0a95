// Package processors runs campaigns whose pages flow to processors, for
// real: the Temporal dev server, Postgres, nodes, and processors as their
// own processes (Go and TypeScript) or in the test (package processor).
package processors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

// shopWeb serves a shop of pages pages on one loopback host.
func shopWeb(t *testing.T, pages int, latency time.Duration) (*synthweb.Web, *synthweb.Shop) {
	t.Helper()
	shop := synthweb.NewShop(pages)
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 1, Pages: 1, Latency: latency,
		Custom:     map[int]map[string]http.HandlerFunc{0: shop.Site()},
		ExtraLinks: map[int][]string{0: {synthweb.ShopRoot}},
	})
	return web, shop
}

// shopSpec crawls the shop from the root page that links it, with these
// processors: shop.Pages()+1 pages.
func shopSpec(web *synthweb.Web, procs ...campaign.Processor) campaign.Spec {
	return campaign.Spec{
		Seeds:      []string{web.Seed()},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 8},
		Processors: procs,
	}
}

// productsOn is the spec entry of the example processors, on queue.
func productsOn(queue string) campaign.Processor {
	return campaign.Processor{Name: "products", TaskQueue: queue, Activity: "products", BatchSize: 50,
		Timeout: campaign.Duration(10 * time.Second),
		Retry:   campaign.ProcessorRetry{InitialInterval: campaign.Duration(200 * time.Millisecond)}}
}

func key(t *testing.T, s *harness.Stack, id string) int64 {
	t.Helper()
	k, err := s.Store.CampaignKey(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// items are a campaign's items of one processor, as export writes them.
func items(t *testing.T, s *harness.Stack, id, proc string) []synthweb.Product {
	t.Helper()
	var out []synthweb.Product
	_, err := s.Store.ExportItems(bg, key(t, s, id), proc, func(it store.Item) error {
		var p synthweb.Product
		if err := json.Unmarshal(it.Item, &p); err != nil {
			return fmt.Errorf("item of %s: %w", it.URL, err)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// equalTruth says how the items differ from the shop's products: each
// product must be there exactly once, field for field.
func equalTruth(t *testing.T, shop *synthweb.Shop, got []synthweb.Product) {
	t.Helper()
	seen := map[string]int{}
	want := map[string]synthweb.Product{}
	for _, p := range shop.Products {
		want[p.SKU] = p
	}
	wrong := 0
	for _, p := range got {
		seen[p.SKU]++
		if w, ok := want[p.SKU]; !ok || w != p {
			if wrong++; wrong <= 5 {
				t.Errorf("item %+v, want %+v", p, w)
			}
		}
	}
	missing, twice := 0, 0
	for sku := range want {
		switch n := seen[sku]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	if missing > 0 || twice > 0 || wrong > 0 || len(got) != len(shop.Products) {
		t.Errorf("%d items for %d products: %d missing, %d more than once, %d wrong", len(got), len(shop.Products), missing, twice, wrong)
	}
}

func processorStatus(t *testing.T, s *harness.Stack, id string) map[string]harness.ProcessorCounts {
	t.Helper()
	st, err := harness.ProcessorStatus(bg, s.Store, key(t, s, id))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGoProcessorItemsEqualTheShop: a 2,000 page shop crawled with the Go
// example processor (its own process): the exported items are the shop's
// products, none missing, none twice.
func TestGoProcessorItemsEqualTheShop(t *testing.T) {
	s := harness.NewStack(t)
	serving := func(c *config.Config) { c.Node.BodiesAddr = "127.0.0.1:0" }
	s.StartNodeWith("a", 1, serving)
	s.StartNodeWith("b", 1, serving)
	web, shop := shopWeb(t, 2000, 0)
	queue := s.Name + ".products"
	cmd := exec.Command(harness.GoBinary(t, "./examples/shop-go"))
	cmd.Env = []string{"PROCESSOR_QUEUE=" + queue}
	s.StartCommand("shop-go", cmd)

	// Batches by reference, carried in the campaign's own history (see
	// TestFailingProcessorFailsItsPagesAndTheCampaignCompletes for the
	// children that carry batches whose pages go inline).
	products := productsOn(queue)
	products.Batch = campaign.BatchReference
	sum := harness.RunCampaign(t, s, "shop-go", shopSpec(web, products), 5*time.Minute)
	pages := int64(shop.Pages() + 1)
	if sum.Fetched != pages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, pages)
	}
	if missing, dup := web.Tally(); missing != 0 || dup != 0 {
		t.Errorf("%d pages never requested, %d requested twice", missing, dup)
	}
	equalTruth(t, shop, items(t, s, "shop-go", "products"))
	st := processorStatus(t, s, "shop-go")["products"]
	if st.Processed != pages || st.Failed != 0 || st.Pending != 0 || st.Leased != 0 {
		t.Errorf("processor status %+v: want all %d pages processed", st, pages)
	}
	if n := bodiesLeft(t, s, "shop-go"); n != 0 {
		t.Errorf("%d page bodies or chunks kept after every page was processed", n)
	}
	// The pages went in chunks (processors version 8), never a row each:
	// each insert shows in the server's statistics within a second or so.
	harness.Eventually(t, 30*time.Second, "chunks written", func() bool {
		return s.Strings(`SELECT (n_tup_ins > 0)::text FROM pg_stat_user_tables WHERE relname = 'body_chunks'`)[0] == "true"
	})
	if rows := s.Strings(`SELECT n_tup_ins::text FROM pg_stat_user_tables WHERE relname = 'page_bodies'`)[0]; rows != "0" {
		t.Errorf("%s page_bodies rows written, want every page in chunks", rows)
	}
	if inRun, inChildren := batchPlaces(t, s, "shop-go", "products"); inRun == 0 || inChildren != 0 {
		t.Errorf("%d batches ran in the campaign's history and %d in children: want all in the campaign's", inRun, inChildren)
	}
	harness.RecordHistory(t, s.Client, "shop-go", "processors_shop")
	if child := busyChild(t, s, "shop-go"); child != "" {
		harness.RecordHistory(t, s.Client, child, "processor_batch")
	}
	t.Logf("%d pages, %d items, %d batches", sum.Fetched, st.Items, campaignStatus(t, s, "shop-go").Batches)
}

// TestFailingProcessorFailsItsPagesAndTheCampaignCompletes: a processor
// that always throws: once its retry policy runs out, its pages end failed
// with the error, and the campaign completes.
func TestFailingProcessorFailsItsPagesAndTheCampaignCompletes(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	web, shop := shopWeb(t, 200, 0)
	queue := s.Name + ".broken"
	boom := errors.New("boom: the processor cannot read this page")
	p := processor.New("broken").Queue(queue).OnPage(func(*processor.Page) error { return boom })
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })

	// Batches by reference, but no node serves them: they go to
	// ProcessBatch children, their pages inline.
	spec := shopSpec(web, campaign.Processor{Name: "broken", TaskQueue: queue, Activity: "broken", BatchSize: 50,
		Batch: campaign.BatchReference,
		Retry: campaign.ProcessorRetry{MaxAttempts: 3, InitialInterval: campaign.Duration(100 * time.Millisecond)}})
	sum := harness.RunCampaign(t, s, "broken", spec, 3*time.Minute)
	if inRun, inChildren := batchPlaces(t, s, "broken", "broken"); inRun != 0 || inChildren == 0 {
		t.Errorf("%d batches ran in the campaign's history and %d in children: want all in children, since no node serves batches", inRun, inChildren)
	}
	pages := int64(shop.Pages() + 1)
	if sum.Fetched != pages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, pages)
	}
	st := processorStatus(t, s, "broken")["broken"]
	if st.Failed != pages || st.Processed != 0 || st.Items != 0 {
		t.Errorf("processor status %+v: want all %d pages failed", st, pages)
	}
	var failures []string
	for _, e := range failedErrors(t, s, "broken") {
		if !contains(e, boom.Error()) {
			failures = append(failures, e)
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d failed pages do not carry the processor's error, e.g. %q", len(failures), failures[0])
	}
	if got := campaignStatus(t, s, "broken"); got.Failed != pages || got.LastError == "" {
		t.Errorf("workflow status of the processor: %+v", got)
	}
}

// bodiesLeft counts the page bodies and chunks still kept for a campaign.
func bodiesLeft(t *testing.T, s *harness.Stack, id string) int {
	t.Helper()
	n := s.Strings(`SELECT ((SELECT count(*) FROM page_bodies WHERE campaign = $1) + (SELECT count(*) FROM body_chunks WHERE campaign = $1))::text`,
		key(t, s, id))
	var c int
	fmt.Sscan(n[0], &c)
	return c
}

// failedErrors are the errors of a campaign's failed deliveries.
func failedErrors(t *testing.T, s *harness.Stack, id string) []string {
	t.Helper()
	return s.Strings(`SELECT coalesce(error, '') FROM deliveries WHERE campaign = $1 AND state = 'failed'`, key(t, s, id))
}

// campaignStatus is the first processor's figures as the workflow's
// status query reports them.
func campaignStatus(t *testing.T, s *harness.Stack, id string) campaign.ProcessorCounters {
	t.Helper()
	st, err := s.Campaigns.Status(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processors) == 0 {
		t.Fatalf("status of %s shows no processor", id)
	}
	return st.Processors[0].ProcessorCounters
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestKilledProcessorAndNodeLoseNoItem: kill -9 the processor's worker
// mid-campaign (another starts after it), and then a node that fetches the
// pages it gets. The campaign completes, and the items are still exactly
// the shop's products.
func TestKilledProcessorAndNodeLoseNoItem(t *testing.T) {
	s := harness.NewStack(t)
	// Both nodes serve batches and bodies, which go by reference: the
	// dead node's references fail over to the live one.
	nodes := map[string]*harness.NodeProcess{}
	for _, short := range []string{"a", "b"} {
		n := s.StartNodeProcess(short, 1, "--bodies-addr", "127.0.0.1:0")
		nodes[n.ID] = n
	}
	web, shop := shopWeb(t, 2000, 10*time.Millisecond)
	queue := s.Name + ".products"
	// The example's extraction, 20 ms a page: a batch of 50 takes a
	// second, so batches are at the processor when it is killed.
	startProcessor := func(name string) *harness.NodeProcess {
		cmd := exec.Command(harness.GoBinary(t, "./tests/cmd/shopproc"))
		cmd.Env = []string{"PROCESSOR_QUEUE=" + queue, "PAGE_DELAY=20ms"}
		return s.StartCommand(name, cmd)
	}
	first := startProcessor("shop-go-1")
	products := productsOn(queue)
	products.Batch = campaign.BatchReference
	spec := shopSpec(web, products)
	spec.Politeness.MaxConcurrencyPerHost = 2
	spec.Dispatch.HeartbeatTimeout = campaign.Duration(3 * time.Second)
	spec.Dispatch.LeaseTTL = campaign.Duration(10 * time.Second)
	r, err := s.Campaigns.Start(bg, "chaos", spec)
	if err != nil {
		t.Fatal(err)
	}
	count := func(q string) int { // q names the campaign $1 (its ID)
		var n int
		fmt.Sscan(s.Strings(q, "chaos")[0], &n)
		return n
	}
	// Pages processed: done rows of batches that marked theirs leased,
	// and the counts of batches that held theirs (processors version 4).
	const processed = `
		SELECT ((SELECT count(*) FROM deliveries WHERE campaign = (SELECT key FROM campaigns WHERE id = $1) AND state = 'done') +
		        (SELECT coalesce(sum(pages), 0) FROM processed_batches WHERE campaign = (SELECT key FROM campaigns WHERE id = $1)))::text`
	harness.Eventually(t, 2*time.Minute, "300 pages processed, and a batch at the processor", func() bool {
		return count(processed) >= 300 &&
			startedActivities(t, s, "chaos", "products") > 0
	})
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	processedAtKill := count(processed)
	startProcessor("shop-go-2")
	harness.Eventually(t, 2*time.Minute, "1,000 pages fetched", func() bool {
		return count(`SELECT count(*)::text FROM pages WHERE campaign = (SELECT key FROM campaigns WHERE id = $1)`) >= 1000
	})
	// The shop is one host: the node that feeds the processor is the one
	// the hash gave it to (either, run to run), the node of the last page.
	victim := nodes[s.Strings(`SELECT node FROM pages WHERE campaign = (SELECT key FROM campaigns WHERE id = $1)
		ORDER BY fetched_at DESC LIMIT 1`, "chaos")[0]]
	if victim == nil {
		t.Fatal("the last page was fetched by neither node")
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	fetchedAtKill := count(`SELECT count(*)::text FROM pages WHERE campaign = (SELECT key FROM campaigns WHERE id = $1)`)
	ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := r.Get(ctx, &sum); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	equalTruth(t, shop, items(t, s, "chaos", "products"))
	st := processorStatus(t, s, "chaos")["products"]
	pages := int64(shop.Pages() + 1)
	if sum.Fetched != pages || st.Processed != pages || st.Failed != 0 {
		t.Errorf("fetched %d, processor status %+v: want %d fetched and processed", sum.Fetched, st, pages)
	}
	// The shop went from the killed node to the other one.
	byVictim := map[bool]int{}
	for _, node := range s.Strings(`SELECT node FROM pages WHERE campaign = (SELECT key FROM campaigns WHERE id = $1)`, "chaos") {
		byVictim[node == victim.ID]++
	}
	if byVictim[true] == 0 || byVictim[false] == 0 {
		t.Errorf("the killed node fetched %d pages and the live one %d: want some each, the shop moved",
			byVictim[true], byVictim[false])
	}
	again := retriedBatches(t, s, "chaos", r.GetRunID(), "products")
	if inInput, byRef, servers := batchesSent(t, s, "chaos", r.GetRunID(), "products"); inInput != 0 || byRef < int(pages) || servers != 2 {
		t.Errorf("the processor's inputs carried %d pages, and batch references %d, from at most %d nodes: "+
			"want every page (%d) in a batch by reference, from 2", inInput, byRef, servers, pages)
	}
	missing, dup := web.Tally()
	t.Logf("processor killed at %d pages processed, node %s at %d fetched (the other fetched %d); "+
		"%d batches ran again after a lost attempt; "+
		"%d pages never requested, %d requested twice (at-least-once for the dead node's in-flight URLs)",
		processedAtKill, victim.ID, fetchedAtKill, byVictim[false], again, missing, dup)
	if missing != 0 {
		t.Errorf("%d pages never requested", missing)
	}
	if again == 0 {
		t.Errorf("no batch was tried again: the processor was not killed mid-batch, so the test proved nothing")
	}
}

// TestProcessorDownHoldsFetchingBack: with the processor down from the
// start, its first batches wait at its task queue, and the campaign stops
// fetching once max_pending pages wait for it (counted by each frontier
// lease, since no batch comes back to say so). Started later, the
// processor takes every page, and the items are exactly the shop's.
func TestProcessorDownHoldsFetchingBack(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	// 20 ms a page, two at a time: the frontier's batches in flight are
	// small beside what the shop has.
	web, shop := shopWeb(t, 2000, 20*time.Millisecond)
	queue := s.Name + ".products"
	proc := productsOn(queue)
	proc.MaxPending, proc.BatchSize, proc.Window = 100, 20, 2
	spec := shopSpec(web, proc)
	spec.Politeness.MaxConcurrencyPerHost = 2
	r, err := s.Campaigns.Start(bg, "held", spec)
	if err != nil {
		t.Fatal(err)
	}
	want := "waiting for processor products"
	harness.Eventually(t, 2*time.Minute, "the campaign "+want, func() bool {
		st, err := s.Campaigns.Status(bg, "held")
		return err == nil && st.State == want
	})
	var fetched int
	fmt.Sscan(s.Strings(`SELECT count(*)::text FROM pages WHERE campaign = $1`, key(t, s, "held"))[0], &fetched)
	if total := shop.Pages() + 1; fetched >= total/4 {
		t.Errorf("%d of %d pages fetched when the campaign held back: it did not hold back for the processor", fetched, total)
	}
	cmd := exec.Command(harness.GoBinary(t, "./examples/shop-go"))
	cmd.Env = []string{"PROCESSOR_QUEUE=" + queue}
	s.StartCommand("shop-go", cmd)
	ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := r.Get(ctx, &sum); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	equalTruth(t, shop, items(t, s, "held", "products"))
	if pages := int64(shop.Pages() + 1); sum.Fetched != pages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, pages)
	}
	t.Logf("held back at %d pages fetched (max_pending 100)", fetched)
}

// busyChild is the workflow ID of a ProcessBatch child of the campaign's
// latest run that carried more than one batch (its history is the
// longest), or "" if it has no children.
func busyChild(t *testing.T, s *harness.Stack, id string) string {
	t.Helper()
	d, err := s.Client.DescribeWorkflowExecution(bg, id, "")
	if err != nil {
		t.Fatal(err)
	}
	best, most := "", 0
	eachEvent(t, s, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), func(e *history.HistoryEvent) {
		a := e.GetChildWorkflowExecutionStartedEventAttributes()
		if a == nil {
			return
		}
		n := 0
		c := a.GetWorkflowExecution()
		eachEvent(t, s, c.GetWorkflowId(), c.GetRunId(), func(*history.HistoryEvent) { n++ })
		if n > most {
			best, most = c.GetWorkflowId(), n
		}
	})
	return best
}

// retriedBatches counts the batches of activity type activity, in the
// campaign's runs from run on and their ProcessBatch children, that
// completed on an attempt after the first.
func retriedBatches(t *testing.T, s *harness.Stack, id, run, activity string) int {
	t.Helper()
	n := 0
	types := map[string]string{} // by workflow and event ID
	eachBatchEvent(t, s, id, run, func(wf string, e *history.HistoryEvent) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[fmt.Sprint(wf, e.GetEventId())] = a.GetActivityType().GetName()
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 && types[fmt.Sprint(wf, a.GetScheduledEventId())] == activity {
			n++
		}
	})
	return n
}

// eachBatchEvent calls fn on each event of the campaign's runs from run on
// and of their ProcessBatch children, with the run's ID.
func eachBatchEvent(t *testing.T, s *harness.Stack, id, run string, fn func(run string, e *history.HistoryEvent)) {
	t.Helper()
	eachEvent(t, s, id, run, func(e *history.HistoryEvent) {
		fn(id, e)
		if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
			child := a.GetWorkflowExecution()
			eachEvent(t, s, child.GetWorkflowId(), child.GetRunId(), func(e *history.HistoryEvent) { fn(child.GetRunId(), e) })
		}
	})
}

// batchPlaces counts the processor activities scheduled in the campaign's
// runs, and in their ProcessBatch children.
func batchPlaces(t *testing.T, s *harness.Stack, id, activity string) (inRun, inChildren int) {
	t.Helper()
	d, err := s.Client.DescribeWorkflowExecution(bg, id, "")
	if err != nil {
		t.Fatal(err)
	}
	run := d.GetWorkflowExecutionInfo().GetFirstRunId()
	eachBatchEvent(t, s, id, run, func(wf string, e *history.HistoryEvent) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activity {
			if wf == id {
				inRun++
			} else {
				inChildren++
			}
		}
	})
	return inRun, inChildren
}

// batchesSent counts the pages the campaign's processor activities got
// in their input and by batch reference, and the most nodes a batch
// reference named.
func batchesSent(t *testing.T, s *harness.Stack, id, run, activity string) (inInput, byRef, servers int) {
	t.Helper()
	eachInput(t, s, id, run, activity, func(req campaign.ProcessRequest) {
		inInput += len(req.Pages)
		if req.Batch != nil {
			byRef += req.Batch.Pages
			servers = max(servers, len(req.Batch.URLs))
		}
	})
	return inInput, byRef, servers
}

// eachInput calls fn on the input of each activity of type activity that
// the campaign's runs from run on, and their ProcessBatch children,
// scheduled.
func eachInput(t *testing.T, s *harness.Stack, id, run, activity string, fn func(campaign.ProcessRequest)) {
	t.Helper()
	eachBatchEvent(t, s, id, run, func(_ string, e *history.HistoryEvent) {
		a := e.GetActivityTaskScheduledEventAttributes()
		if a == nil || a.GetActivityType().GetName() != activity {
			return
		}
		var req campaign.ProcessRequest
		if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &req); err != nil {
			t.Fatal(err)
		}
		fn(req)
	})
}

// eachEvent calls fn on each history event of a workflow's runs from run
// on, following continue-as-new.
func eachEvent(t *testing.T, s *harness.Stack, id, run string, fn func(*history.HistoryEvent)) {
	t.Helper()
	for run != "" {
		next := ""
		it := s.Client.GetWorkflowHistory(bg, id, run, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			fn(e)
			if a := e.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		run = next
	}
}

// startedActivities counts the activities of a type that a worker has
// started and not finished, in the campaign's running run and its
// running ProcessBatch children.
func startedActivities(t *testing.T, s *harness.Stack, id, activity string) int {
	t.Helper()
	d, err := s.Client.DescribeWorkflowExecution(bg, id, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	count := func(pending []*workflowpb.PendingActivityInfo) {
		for _, a := range pending {
			if a.GetActivityType().GetName() == activity && a.GetState() == enums.PENDING_ACTIVITY_STATE_STARTED {
				n++
			}
		}
	}
	count(d.GetPendingActivities())
	for _, c := range d.GetPendingChildren() {
		cd, err := s.Client.DescribeWorkflowExecution(bg, c.GetWorkflowId(), c.GetRunId())
		if err != nil {
			continue // it has just ended
		}
		count(cd.GetPendingActivities())
	}
	return n
}

// TestTypeScriptProcessorMatchesGo: the shop example's processor written in
// TypeScript (examples/shop-ts, the Temporal TypeScript SDK from npm)
// produces the same items on the same shop.
func TestTypeScriptProcessorMatchesGo(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "examples", "shop-ts")
	npm := func(args ...string) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = dir
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s in %s (Node.js 20 and npm are needed): %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		return time.Since(began)
	}
	installed := time.Duration(0)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@temporalio", "worker")); err != nil {
		installed = npm("ci", "--no-audit", "--no-fund")
	}
	built := npm("run", "build")
	t.Logf("npm ci: %v (0: node_modules was there), tsc: %v", installed.Round(time.Millisecond), built.Round(time.Millisecond))

	// The nodes serve bodies, behind the node secret the harness puts in
	// the environment, and send every body by reference: the TypeScript
	// processor gets each from a node, presenting the secret.
	s := harness.NewStack(t)
	serving := func(c *config.Config) { c.Node.BodiesAddr = "127.0.0.1:0" }
	s.StartNodeWith("a", 1, serving)
	s.StartNodeWith("b", 1, serving)
	web, shop := shopWeb(t, 2000, 0)
	queue := s.Name + ".products-ts"
	cmd := exec.Command("node", filepath.Join(dir, "lib", "worker.js"))
	cmd.Env = []string{"PROCESSOR_QUEUE=" + queue}
	s.StartCommand("shop-ts", cmd)

	p := productsOn(queue)
	p.Bodies = campaign.BodiesReference
	sum := harness.RunCampaign(t, s, "shop-ts", shopSpec(web, p), 5*time.Minute)
	equalTruth(t, shop, items(t, s, "shop-ts", "products"))
	st := processorStatus(t, s, "shop-ts")["products"]
	if pages := int64(shop.Pages() + 1); sum.Fetched != pages || st.Processed != pages || st.Failed != 0 {
		t.Errorf("fetched %d, processor status %+v: want %d fetched and processed", sum.Fetched, st, pages)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestLargeBodiesStayUnderTheTaskLimit: pages of 60 KB, batches of 20 and
// a window of 8 make a backlog of 24 MB of bodies, all leased at once.
// Carried through the campaign's own history, they would overflow the
// 4 MiB a workflow task may write (the server failed such tasks, and
// terminated the campaign). Each batch runs in a ProcessBatch child: the
// campaign's history never holds a body, no task fails, and every page is
// processed once.
//
// A batch carries at most 512 KiB of bodies inline: the rest of its pages
// come by reference, served by the node over HTTP (--bodies-addr), so
// this also proves the reference path.
func TestLargeBodiesStayUnderTheTaskLimit(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.BodiesAddr = "127.0.0.1:0" })
	web := harness.StartWeb(t, synthweb.Config{Hosts: 2, Pages: 400, LinksPerPage: 3, Seed: 5, PageBytes: 60_000})
	queue := s.Name + ".sizes"
	var mu sync.Mutex
	sizes := map[string]int{}
	p := processor.New("sizes").Queue(queue).OnPage(func(pg *processor.Page) error {
		mu.Lock()
		sizes[pg.URL]++
		mu.Unlock()
		return pg.Item(map[string]int{"bytes": len(pg.Body)})
	})
	spec := campaign.Spec{
		Seeds: []string{web.Seed()}, Scope: campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 8},
		Processors: []campaign.Processor{{Name: "sizes", TaskQueue: queue, Activity: "sizes", BatchSize: 20, Window: 8,
			InlineBodyLimit: campaign.MaxInlineBodyLimit}},
	}
	r, err := s.Campaigns.Start(bg, "sizes", spec)
	if err != nil {
		t.Fatal(err)
	}
	// The processor starts once every page is fetched: the whole backlog
	// is there to lease at once.
	harness.Eventually(t, 2*time.Minute, "all 400 pages fetched", func() bool {
		return s.Strings(`SELECT count(*)::text FROM pages WHERE campaign = (SELECT key FROM campaigns WHERE id = 'sizes')`)[0] == "400"
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(bg, 3*time.Minute)
	defer wcancel()
	if err := r.Get(wctx, nil); err != nil {
		t.Fatalf("campaign: %v (task failures: %q)", err, failedTasks(t, s, "sizes", r.GetRunID()))
	}
	if failed := failedTasks(t, s, "sizes", r.GetRunID()); len(failed) > 0 {
		t.Errorf("%d workflow tasks failed: %q", len(failed), failed)
	}
	d, err := s.Client.DescribeWorkflowExecution(bg, "sizes", "")
	if err != nil {
		t.Fatal(err)
	}
	if size := d.GetWorkflowExecutionInfo().GetHistorySizeBytes(); size > 2<<20 {
		t.Errorf("the campaign's history holds %d bytes: bodies went through it", size)
	}
	st := processorStatus(t, s, "sizes")["sizes"]
	if st.Processed != 400 || st.Items != 400 || st.Failed != 0 {
		t.Errorf("processor status %+v: want 400 pages processed", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 400 {
		t.Errorf("the processor saw %d pages, want 400", len(sizes))
	}
	byRef := s.Strings(`SELECT count(*)::text FROM items WHERE campaign = (SELECT key FROM campaigns WHERE id = 'sizes') AND (item->>'bytes')::int >= 60000`)
	t.Logf("%s of 400 items saw a body of 60 KB or more", byRef[0])
}

// failedTasks says why workflow tasks failed, or the campaign was
// terminated, in its runs from run on and in their ProcessBatch children.
//
// A task the server turned back as UnhandledCommand is left out: it
// closed the run while an event came in (a timer firing, a child
// ending), and the worker ran the task again with that event seen.
// Nothing it wrote was refused for its size, and nothing was lost.
func failedTasks(t *testing.T, s *harness.Stack, id, run string) []string {
	t.Helper()
	var failed []string
	var walk func(id string) func(e *history.HistoryEvent)
	walk = func(id string) func(e *history.HistoryEvent) {
		return func(e *history.HistoryEvent) {
			if a := e.GetWorkflowTaskFailedEventAttributes(); a != nil &&
				a.GetCause() != enums.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND {
				failed = append(failed, fmt.Sprintf("%s: task failed (%s): %s", id, a.GetCause(), a.GetFailure().GetMessage()))
			}
			if a := e.GetWorkflowExecutionTerminatedEventAttributes(); a != nil {
				failed = append(failed, id+": terminated: "+a.GetReason())
			}
			if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
				c := a.GetWorkflowExecution()
				eachEvent(t, s, c.GetWorkflowId(), c.GetRunId(), walk(c.GetWorkflowId()))
			}
		}
	}
	eachEvent(t, s, id, run, walk(id))
	return failed
}

// TestTerminatedBatchChildLosesNoPages: a ProcessBatch child terminated in
// the middle of its batch (as from the Web UI) leaves no page stranded: its
// batch's pages go back to pending, the processor is not done while they
// wait, and every page is processed before the campaign completes.
func TestTerminatedBatchChildLosesNoPages(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	web, shop := shopWeb(t, 100, 0)
	queue := s.Name + ".stuck"
	entered, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	p := processor.New("stuck").Queue(queue).OnPage(func(*processor.Page) error {
		first.Do(func() { close(entered); <-release }) // the first batch hangs until its child is gone
		return nil
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	id := "terminated-child"
	spec := shopSpec(web, campaign.Processor{Name: "stuck", TaskQueue: queue, Activity: "stuck", BatchSize: 20,
		Timeout: campaign.Duration(time.Minute), Retry: campaign.ProcessorRetry{InitialInterval: campaign.Duration(200 * time.Millisecond)}})
	r, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(2 * time.Minute):
		t.Fatal("the processor got no batch in 2 minutes")
	}
	d, err := s.Client.DescribeWorkflowExecution(bg, id, "")
	if err != nil {
		t.Fatal(err)
	}
	// The child whose processor activity hangs: others beside it come and
	// go while we look.
	terminated := 0
	for _, c := range d.GetPendingChildren() {
		cd, err := s.Client.DescribeWorkflowExecution(bg, c.GetWorkflowId(), c.GetRunId())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range cd.GetPendingActivities() {
			if a.GetActivityType().GetName() == "stuck" {
				if err := s.Client.TerminateWorkflow(bg, c.GetWorkflowId(), c.GetRunId(), "test: terminated as from the Web UI"); err != nil {
					t.Fatal(err)
				}
				terminated++
				break
			}
		}
	}
	if terminated != 1 {
		t.Fatalf("terminated %d ProcessBatch children, want the one holding the hung batch", terminated)
	}
	once.Do(func() { close(release) })

	wctx, wcancel := context.WithTimeout(bg, 3*time.Minute)
	defer wcancel()
	var sum campaign.Summary
	if err := r.Get(wctx, &sum); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	pages := int64(shop.Pages() + 1)
	if st := processorStatus(t, s, id)["stuck"]; sum.Fetched != pages || st.Processed != pages || st.Failed != 0 {
		t.Errorf("fetched %d, processor %+v: want all %d pages processed, the terminated child's too", sum.Fetched, st, pages)
	}
}

// TestCancelledCampaignKeepsNoBodyAndLosesNoPage: a campaign cancelled
// while its processor is down, every page fetched and waiting for it (in
// chunks, and in batches out), keeps no body once it ends; started again
// under its ID with the processor up, it fetches the pages again and the
// processor gets every page exactly once.
func TestCancelledCampaignKeepsNoBodyAndLosesNoPage(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	web, shop := shopWeb(t, 100, 0)
	queue := s.Name + ".late"
	id := "cancelled-with-bodies"
	proc := campaign.Processor{Name: "late", TaskQueue: queue, Activity: "late", BatchSize: 20, Window: 2, MaxPending: 1000,
		Timeout: campaign.Duration(10 * time.Second), Retry: campaign.ProcessorRetry{InitialInterval: campaign.Duration(200 * time.Millisecond)}}
	spec := shopSpec(web, proc)
	r, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(shop.Pages() + 1)
	harness.Eventually(t, 2*time.Minute, "every page fetched and waiting for the processor", func() bool {
		k, err := s.Store.CampaignKey(bg, id) // none until the campaign's start has run
		if err != nil {
			return false
		}
		st, err := harness.ProcessorStatus(bg, s.Store, k)
		return err == nil && st["late"].Pending+st["late"].Leased == pages
	})
	if err := s.Campaigns.Cancel(bg, id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var canceled *temporal.CanceledError
	if err := r.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Fatalf("campaign ended with %v, want cancelled", err)
	}
	if n := bodiesLeft(t, s, id); n != 0 {
		t.Errorf("%d page bodies or chunks kept after the campaign was cancelled", n)
	}
	if st := processorStatus(t, s, id)["late"]; st.Pending != 0 || st.Leased != 0 {
		t.Errorf("processor status after the cancel: %+v, want nothing waiting", st)
	}
	if got := s.Strings(`SELECT coalesce(summary->>'unprocessed', '0') FROM campaigns WHERE id = $1`, id)[0]; got != fmt.Sprint(pages) {
		t.Errorf("the stored summary counts %s pages unprocessed, want %d", got, pages)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	p := processor.New("late").Queue(queue).OnPage(func(pg *processor.Page) error {
		mu.Lock()
		seen[pg.URL]++
		mu.Unlock()
		return nil
	})
	pctx, pcancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { pcancel(); <-done })

	sum := harness.RunCampaign(t, s, id, spec, 3*time.Minute)
	if sum.Fetched != pages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, pages)
	}
	if st := processorStatus(t, s, id)["late"]; st.Processed != pages || st.Failed != 0 {
		t.Errorf("processor status %+v: want all %d pages processed", st, pages)
	}
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for u, n := range seen {
		if n != 1 {
			twice = append(twice, u)
		}
	}
	if int64(len(seen)) != pages || len(twice) > 0 {
		t.Errorf("the processor saw %d pages, %d of them more than once (%v); want all %d once", len(seen), len(twice), twice, pages)
	}
	if n := bodiesLeft(t, s, id); n != 0 {
		t.Errorf("%d page bodies or chunks kept after every page was processed", n)
	}
}

// TestTerminatedCampaignKeepsNoBody: a campaign terminated from the Web
// UI or CLI never runs its own finish; one node of the cluster finds it
// closed and finishes it in Postgres: its bodies go, its status says how
// it ended, and its unprocessed pages wait for a run started again under
// its ID.
func TestTerminatedCampaignKeepsNoBody(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.EndedSweep = 200 * time.Millisecond })
	web, shop := shopWeb(t, 100, 0)
	id := "terminated-with-bodies"
	proc := campaign.Processor{Name: "absent", TaskQueue: s.Name + ".absent", Activity: "absent", BatchSize: 20, Window: 2,
		MaxPending: 1000, Timeout: campaign.Duration(10 * time.Second)}
	if _, err := s.Campaigns.Start(bg, id, shopSpec(web, proc)); err != nil {
		t.Fatal(err)
	}
	pages := int64(shop.Pages() + 1)
	harness.Eventually(t, 2*time.Minute, "every page fetched and waiting for the processor", func() bool {
		k, err := s.Store.CampaignKey(bg, id)
		if err != nil {
			return false
		}
		st, err := harness.ProcessorStatus(bg, s.Store, k)
		return err == nil && st["absent"].Pending+st["absent"].Leased == pages
	})
	if n := bodiesLeft(t, s, id); n == 0 {
		t.Fatal("no bodies kept while the processor is away: the test proves nothing")
	}
	if err := s.Client.TerminateWorkflow(bg, id, "", "an operator's terminate"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "the terminated campaign to be finished in Postgres", func() bool {
		return s.Strings(`SELECT status FROM campaigns WHERE id = $1`, id)[0] == "terminated"
	})
	if n := bodiesLeft(t, s, id); n != 0 {
		t.Errorf("%d page bodies or chunks kept after the campaign was terminated", n)
	}
	if got := s.Strings(`SELECT coalesce(summary->>'unprocessed', '0') FROM campaigns WHERE id = $1`, id)[0]; got != fmt.Sprint(pages) {
		t.Errorf("the stored summary counts %s pages unprocessed, want %d", got, pages)
	}
}
