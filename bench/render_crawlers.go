package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/devstack"
)

// memEvery is how often the crawlers' memory is sampled.
const memEvery = 100 * time.Millisecond

// renderCrawlTimeout bounds one crawl of the app.
const renderCrawlTimeout = 20 * time.Minute

// spiderpool crawls the app with one browser node on a fresh database,
// timed from the campaign's start to its result.
func (b *renderBench) spiderpool() (renderMeasured, error) {
	ctx, cancel := context.WithTimeout(context.Background(), renderCrawlTimeout)
	defer cancel()
	nodes, err := b.stack.startNodes()
	if err != nil {
		return renderMeasured{}, err
	}
	defer nodes.stop()
	node := nodes.procs[0].PID()
	// The node's tree, and the bench's other children: Postgres and the
	// Temporal dev server.
	stopMem := memWatch(memEvery, processTree(node), childrenOf(os.Getpid(), node))
	start := time.Now()
	wr, err := nodes.campaigns.Start(ctx, fmt.Sprintf("render-%d", nodes.n), b.renderSpec())
	if err != nil {
		stopMem()
		return renderMeasured{}, err
	}
	var sum campaign.Summary
	err = wr.Get(ctx, &sum)
	seconds := time.Since(start).Seconds()
	peaks := stopMem()
	if err != nil {
		return renderMeasured{}, err
	}
	stack := peaks[1]
	return b.measured(renderMeasured{Pages: sum.Fetched, Failed: sum.Failed, Seconds: seconds, Memory: peaks[0], Stack: &stack}, start)
}

// crawleeOutput is what crawl.mjs prints.
type crawleeOutput struct {
	Pages   int64   `json:"pages"`
	Failed  int64   `json:"failed"`
	Seconds float64 `json:"seconds"`
	// StartedAt is when run() was called, in Unix milliseconds.
	StartedAt int64 `json:"started_at_ms"`
}

// crawlee crawls the app with crawl.mjs, its storage in a temporary
// directory, timed by the script from run() to its end.
func (b *renderBench) crawlee() (renderMeasured, error) {
	ctx, cancel := context.WithTimeout(context.Background(), renderCrawlTimeout)
	defer cancel()
	storage, err := os.MkdirTemp("", "spiderpool-bench-crawlee-")
	if err != nil {
		return renderMeasured{}, err
	}
	defer os.RemoveAll(storage)
	cmd := exec.CommandContext(ctx, "node", "crawl.mjs", "--seed", b.seed(), "--tabs", fmt.Sprint(b.tabs), "--chromium", b.chromium)
	cmd.Dir = b.crawleeDir
	cmd.Env = append(os.Environ(), "CRAWLEE_STORAGE_DIR="+filepath.Join(storage, "storage"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	devstack.DieWithParent(cmd, syscall.SIGKILL)
	// A crawl past its time is killed with its Chromium: a group of its
	// own, killed whole.
	if cmd.SysProcAttr == nil { // DieWithParent sets nothing off Linux
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return renderMeasured{}, fmt.Errorf("node crawl.mjs: %w", err)
	}
	stopMem := memWatch(memEvery, processTree(cmd.Process.Pid))
	err = cmd.Wait()
	peaks := stopMem()
	if err != nil {
		return renderMeasured{}, fmt.Errorf("node crawl.mjs: %w; it printed %q", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res crawleeOutput
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return renderMeasured{}, fmt.Errorf("crawl.mjs's result %q: %w", lines[len(lines)-1], err)
	}
	return b.measured(renderMeasured{Pages: res.Pages, Failed: res.Failed, Seconds: res.Seconds, Memory: peaks[0]}, time.UnixMilli(res.StartedAt))
}

// printRender writes the pairs and the ratios.
func printRender(w io.Writer, rr *renderRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pair\tcrawler\tpages\tfailed\tseconds\tpages/s\tfound\tduplicate URLs\tapp.js loads\tpeak PSS MiB\tpeak RSS MiB\t\n")
	for i, p := range rr.Pairs {
		for _, c := range []struct {
			name string
			m    renderMeasured
		}{{"spiderpool", p.Spiderpool}, {"Crawlee", p.Crawlee}} {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.1f\t%.2f\t%d/%d\t%d\t%d\t%.0f\t%.0f\t\n", i+1, c.name, c.m.Pages, c.m.Failed,
				c.m.Seconds, c.m.PagesPerSecond, c.m.Found, rr.Site.Pages, c.m.DuplicateURLs, c.m.ScriptLoads, c.m.Memory.PSSMB, c.m.Memory.RSSMB)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nspiderpool/Crawlee pages/s (medians): %.2f; peak PSS spiderpool/Crawlee: %.2f\n", rr.Ratio, rr.MemoryRatio)
	for _, line := range renderNotes(rr) {
		fmt.Fprintln(w, line)
	}
}

// renderNotes are what the table does not show: pages one found and the
// other did not, duplicates by name, other requests.
func renderNotes(rr *renderRun) []string {
	var out []string
	for i, p := range rr.Pairs {
		for _, c := range []struct {
			name string
			m    renderMeasured
		}{{"spiderpool", p.Spiderpool}, {"Crawlee", p.Crawlee}} {
			if len(c.m.Missed) > 0 {
				out = append(out, fmt.Sprintf("pair %d, %s missed %d of the app's pages: %s", i+1, c.name, len(c.m.Missed), strings.Join(firstOf(c.m.Missed, 10), ", ")))
			}
			if len(c.m.Duplicates) > 0 {
				out = append(out, fmt.Sprintf("pair %d, %s requested more than once: %s", i+1, c.name, strings.Join(firstOf(c.m.Duplicates, 10), ", ")))
			}
			if len(c.m.Other) > 0 {
				var other []string
				for _, path := range slices.Sorted(maps.Keys(c.m.Other)) {
					other = append(other, fmt.Sprintf("%s x%d", path, c.m.Other[path]))
				}
				out = append(out, fmt.Sprintf("pair %d, %s also requested %s", i+1, c.name, strings.Join(other, ", ")))
			}
		}
	}
	return out
}

// firstOf is xs's first n, and how many more.
func firstOf(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(xs[:n:n], fmt.Sprintf("and %d more", len(xs)-n))
}
