// Command demo is `make demo`: it serves the bundled synthetic web, runs
// `spiderpool dev` (Postgres, Temporal dev server with Web UI, three nodes
// weighted 1, 1, 2), crawls the web to completion while printing progress,
// and prints a summary checked against the web's own access log.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

type devState struct {
	TemporalAddress string `json:"temporal_address"`
	WebUI           string `json:"web_ui"`
	ControlQueue    string `json:"control_queue"`
	Nodes           []struct {
		ID      string  `json:"id"`
		Weight  float64 `json:"weight"`
		PID     int     `json:"pid"`
		Metrics string  `json:"metrics"`
	} `json:"nodes"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	web      synthweb.Config
	delay    time.Duration
	bin      string
	stateDir string
	linger   bool
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.web.Hosts, "hosts", 24, "hosts of the synthetic web")
	flag.IntVar(&o.web.Pages, "pages", 6000, "pages of the synthetic web")
	flag.IntVar(&o.web.LinksPerPage, "links", 8, "extra links per page")
	flag.DurationVar(&o.web.Latency, "latency", 2*time.Millisecond, "response latency of the synthetic web")
	flag.DurationVar(&o.delay, "delay", 100*time.Millisecond, "politeness: least time between two requests to a host")
	flag.StringVar(&o.bin, "spiderpool", "bin/spiderpool", "the spiderpool binary")
	flag.StringVar(&o.stateDir, "state-dir", ".spiderpool", "state directory of spiderpool dev")
	flag.BoolVar(&o.linger, "linger", isTerminal(os.Stdin), "keep the stack up after the summary until Ctrl-C")
	flag.Parse()
	o.web.Seed, o.web.CrossHostFraction = 2026, 0.3
	return o
}

func run() error {
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	w, err := synthweb.Start(o.web)
	if err != nil {
		return err
	}
	defer w.Close()
	fmt.Printf("synthetic web: %d pages over %d hosts on 127.0.0.1, seed %s\n\n", o.web.Pages, o.web.Hosts, w.Seed())

	state, stopDev, err := startDev(ctx, o.bin, o.stateDir)
	if err != nil {
		return err
	}
	defer stopDev()
	cs, closeClient, err := dialCampaigns(ctx, state)
	if err != nil {
		return err
	}
	defer closeClient()
	id := "demo-" + time.Now().UTC().Format("20060102-150405")
	if err := startCampaign(ctx, cs, id, w.Seed(), o.delay, state); err != nil {
		return err
	}
	sum, err := watchProgress(ctx, cs, id)
	if err != nil {
		return err
	}
	report(sum, w)
	findInVisibility(ctx, cs, id)
	printWhereToLook(state, o.stateDir, id)
	if o.linger {
		fmt.Printf("\nThe stack is still up: Web UI %s. Ctrl-C stops everything.\n", state.WebUI)
		<-ctx.Done()
	}
	return nil
}

// startDev runs `spiderpool dev` and waits until it has written its state;
// stop interrupts it and waits for it to end.
func startDev(ctx context.Context, bin, stateDir string) (_ devState, stop func(), err error) {
	statePath := filepath.Join(stateDir, "dev.json")
	_ = os.Remove(statePath)
	dev := exec.Command(bin, "dev", "--state-dir", stateDir, "--log-level", "warn")
	dev.Stdout, dev.Stderr = os.Stdout, os.Stderr
	devstack.DieWithParent(dev, syscall.SIGTERM)
	if err := dev.Start(); err != nil {
		return devState{}, nil, fmt.Errorf("start %s dev: %w (did `make build` run?)", bin, err)
	}
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Wait() }()
	stop = func() {
		_ = dev.Process.Signal(os.Interrupt)
		<-devDone
	}
	state, err := waitForDev(ctx, statePath, devDone)
	if err != nil {
		stop()
		return devState{}, nil, err
	}
	return state, stop, nil
}

// dialCampaigns reaches the dev stack's Temporal and control queue.
func dialCampaigns(ctx context.Context, state devState) (*control.Campaigns, func(), error) {
	cfg := config.Default()
	cfg.TemporalAddress, cfg.ControlQueue = state.TemporalAddress, state.ControlQueue
	c, err := control.Dial(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	return &control.Campaigns{Client: c, Queue: cfg.ControlQueue}, c.Close, nil
}

// startCampaign starts the demo's polite crawl of the web from seed, and
// says where to watch it and which nodes to kill.
func startCampaign(ctx context.Context, cs *control.Campaigns, id, seed string, delay time.Duration, state devState) error {
	spec := campaign.Spec{
		Seeds: []string{seed},
		// Requisites on: a page's images, styles and scripts are fetched
		// with it, counted apart (see docs/operations.md, WARC).
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}, Requisites: true},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(delay), MaxConcurrencyPerHost: 1},
		Dispatch:   campaign.Dispatch{BatchSize: 50},
	}
	if _, err := cs.Start(ctx, id, spec); err != nil {
		return err
	}
	fmt.Printf("\ncampaign %s started.\n", id)
	if state.WebUI != "" {
		fmt.Printf("watch it in the Temporal Web UI: %s/namespaces/default/workflows/%s\n", state.WebUI, id)
	}
	var pids []string
	for _, n := range state.Nodes {
		pids = append(pids, fmt.Sprintf("%s=%d", n.ID, n.PID))
	}
	fmt.Printf("try killing a node (kill -9 PID; %s): its hosts move to the others.\n\n", strings.Join(pids, " "))
	return nil
}

// watchProgress prints the campaign's progress each second until it ends.
func watchProgress(ctx context.Context, cs *control.Campaigns, id string) (campaign.Summary, error) {
	start := time.Now()
	return control.Watch(ctx, cs, id, time.Second, func(st campaign.Status) {
		var nodes []string
		for _, n := range st.Nodes {
			nodes = append(nodes, fmt.Sprintf("%s %d (%s)", n.ID, n.Fetched, n.State))
		}
		rate := float64(st.Counters.Fetched) / time.Since(start).Seconds()
		fmt.Printf("%5.1fs  fetched %5d  known %5d  %4.0f pages/s  | %s\n", time.Since(start).Seconds(),
			st.Counters.Fetched, st.Counters.Known(), rate, strings.Join(nodes, ", "))
	})
}

// printWhereToLook names the nodes' metrics, the WARC files and the
// export command.
func printWhereToLook(state devState, stateDir, id string) {
	for _, n := range state.Nodes {
		if n.Metrics != "" {
			fmt.Printf("  metrics of %s: %s\n", n.ID, n.Metrics)
		}
	}
	fmt.Printf("  WARC files: %s\n  page records: bin/spiderpool campaign export %s (after: source %s)\n",
		filepath.Join(stateDir, "warc"), id, filepath.Join(stateDir, "dev.env"))
}

// findInVisibility shows the campaign found by its search attributes, as
// the Web UI's filter and `temporal workflow list --query` find it.
// Visibility is updated a moment after the workflow closes.
func findInVisibility(ctx context.Context, cs *control.Campaigns, id string) {
	query := `CampaignStatus="Completed"`
	for range 50 {
		list, err := cs.List(ctx, campaign.StatusCompleted, 20)
		if err != nil {
			fmt.Printf("\n  visibility: %v\n", err)
			return
		}
		for _, c := range list {
			if c.ID == id && c.Fetched != nil {
				fmt.Printf("\n  found by %s: %s, PagesFetched=%d (Web UI list, or: bin/temporal workflow list --query '%s')\n",
					query, id, *c.Fetched, query)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("\n  not yet listed by %s; try: bin/temporal workflow list --query '%s'\n", query, query)
}

func waitForDev(ctx context.Context, path string, devDone <-chan error) (devState, error) {
	var st devState
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return st, json.Unmarshal(b, &st)
		}
		select {
		case err := <-devDone:
			return st, fmt.Errorf("spiderpool dev exited before it was up: %v", err)
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return st, errors.New("spiderpool dev not up after 5 minutes")
		}
	}
}

func report(sum campaign.Summary, w *synthweb.Web) {
	hits := w.Hits()
	once, twice, never := 0, 0, 0
	for _, p := range w.Pages() {
		switch n := hits[p]; {
		case n == 0:
			never++
		case n > w.ExpectedHits(p):
			twice++
		default:
			once++
		}
	}
	fmt.Printf("\n== summary of %s (%s) ==\n", sum.CampaignID, sum.Outcome)
	fmt.Printf("pages fetched     %d in %.1fs: %.0f pages/s\n", sum.Fetched, sum.Seconds, sum.PagesPerSecond)
	fmt.Printf("failures          %d\n", sum.Failed)
	fmt.Printf("excluded          %d\n", sum.Excluded)
	fmt.Printf("per node:\n")
	nodes := make([]string, 0, len(sum.PerNode))
	for n := range sum.PerNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		fmt.Printf("  %-8s %6d pages\n", n, sum.PerNode[n])
	}
	fmt.Printf("checked against the synthetic web's access log (%d pages):\n", len(w.Pages()))
	fmt.Printf("  fetched exactly once %d, more than once %d, never %d\n", once, twice, never)
	if twice > 0 {
		fmt.Println("  (a node killed mid-fetch makes its in-flight pages be fetched again: at-least-once)")
	}
}

// isTerminal is true for a terminal (not /dev/null, also a char device).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
