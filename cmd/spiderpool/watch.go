package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
)

func (a *app) watchCmd() *cobra.Command {
	var (
		every  time.Duration
		plain  bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a campaign with a live progress bar until it ends, then print its summary",
		Long: `Follow a campaign: fetched and known URLs, rate, ETA and a bar per node,
redrawn in place on a terminal. When standard output is not a terminal (a
pipe, a log file, CI) or with --plain, it prints one line per interval
instead. With --json it prints one JSON object a line: {"status": ...} per
interval, then {"summary": ...} (or {"error": ...}) at the end.

Ctrl-C stops watching and exits 0; the campaign goes on. A campaign that
fails or is cancelled exits 4 (see docs/operations.md, "Exit codes").

Temporal CLI equivalent (one look):
  temporal workflow query --workflow-id ID --type status`,
		Example: "  spiderpool campaign watch my-crawl\n  spiderpool campaign watch my-crawl --every 5s --plain >> crawl.log",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			id := args[0]
			w := newWatcher(os.Stdout, time.Now())
			if plain {
				w.tty = false
			}
			report := func(st campaign.Status) { w.report(st, time.Now()) }
			if asJSON {
				report = func(st campaign.Status) { _ = printJSON(WatchLine{Status: &st}) }
			}
			sum, err := control.Watch(ctx, cs, id, every, report)
			switch {
			case err != nil && ctx.Err() != nil: // Ctrl-C: the campaign is not ours to stop
				fmt.Fprintf(os.Stderr, "stopped watching; campaign %s goes on\n", id)
				return nil
			case err != nil:
				err = campaignEnded(err)
				if asJSON {
					_ = printJSON(WatchLine{CampaignID: id, Error: err.Error()})
				}
				return err
			case asJSON:
				return printJSON(WatchLine{Summary: &sum})
			}
			printSummary(os.Stdout, sum)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&every, "every", time.Second, "how often to refresh")
	cmd.Flags().BoolVar(&plain, "plain", false, "print a line per refresh even on a terminal")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object a line: the status each refresh, then the summary")
	return cmd
}

// WatchLine is one line of `campaign watch --json`: exactly one of Status
// (each refresh), Summary (the campaign completed) or Error (it failed or
// was cancelled) is set.
type WatchLine struct {
	Status     *campaign.Status  `json:"status,omitempty"`
	Summary    *campaign.Summary `json:"summary,omitempty"`
	CampaignID string            `json:"campaign_id,omitempty"`
	Error      string            `json:"error,omitempty"`
}

// watcher draws a campaign's progress: a frame redrawn in place on a
// terminal, a line per report otherwise.
type watcher struct {
	out   io.Writer
	tty   bool
	width int
	start time.Time
	drawn int // lines of the last frame
	rate  rateMeter
}

func newWatcher(out *os.File, now time.Time) *watcher {
	w := &watcher{out: out, width: 80, start: now}
	if fd := int(out.Fd()); term.IsTerminal(fd) {
		w.tty = true
		if cols, _, err := term.GetSize(fd); err == nil && cols > 40 {
			w.width = cols
		}
	}
	return w
}

func (w *watcher) report(st campaign.Status, now time.Time) {
	w.rate.add(now, st.Counters.Fetched)
	p := measure(st, w.rate.perSecond())
	if !w.tty {
		fmt.Fprintf(w.out, "%s  %s  %.0f pages/s  ETA %s\n", now.Format("15:04:05"), progressLine(st), p.rate, p.eta())
		return
	}
	frame := renderFrame(st, p, now.Sub(w.start), w.width)
	if w.drawn > 0 {
		fmt.Fprintf(w.out, "\x1b[%dF\x1b[J", w.drawn) // back to the frame's top, clear below
	}
	fmt.Fprint(w.out, strings.Join(frame, "\n")+"\n")
	w.drawn = len(frame)
}

// progress is the arithmetic of one frame.
type progress struct {
	done, known int64 // URLs settled; URLs known (inserted into the frontier)
	rate        float64
}

func measure(st campaign.Status, rate float64) progress {
	c := st.Counters
	done := c.Fetched + c.Failed + c.Excluded
	// Status.Pending is counted only when nothing is due, so the frontier's
	// size comes from the URLs inserted: seeds, added and found by links.
	known := max(c.Known(), done+st.Pending+int64(inflight(st)))
	return progress{done: done, known: known, rate: rate}
}

func (p progress) fraction() float64 {
	if p.known == 0 {
		return 0
	}
	return float64(p.done) / float64(p.known)
}

// eta is the time left at the current rate for the URLs known now; more
// are found as pages are fetched, so it is a lower bound until the end.
func (p progress) eta() string {
	left := p.known - p.done
	switch {
	case left <= 0:
		return "0s"
	case p.rate < 0.5:
		return "-"
	}
	return time.Duration(float64(left) / p.rate * float64(time.Second)).Round(time.Second).String()
}

// renderFrame lays out the terminal frame: header, overall bar, counters
// and a bar per node showing its share of the pages fetched.
func renderFrame(st campaign.Status, p progress, elapsed time.Duration, width int) []string {
	c := st.Counters
	barW := max(10, min(50, width-48))
	lines := []string{
		fmt.Sprintf("campaign %s  %s  run %d  %s elapsed", st.CampaignID, st.State, st.Run, elapsed.Round(time.Second)),
		fmt.Sprintf("%s %3.0f%%  %d/%d URLs  %.0f pages/s  ETA %s",
			bar(p.fraction(), barW), 100*p.fraction(), p.done, p.known, p.rate, p.eta()),
		fmt.Sprintf("fetched %d  failed %d  excluded %d  known %d  in flight %d",
			c.Fetched, c.Failed, c.Excluded, c.Known(), inflight(st)),
	}
	idW := 4
	for _, n := range st.Nodes {
		idW = max(idW, len(n.ID))
	}
	for _, n := range st.Nodes {
		share := 0.0
		if c.Fetched > 0 {
			share = float64(n.Fetched) / float64(c.Fetched)
		}
		lines = append(lines, fmt.Sprintf("  %-*s %-9s w%-5s %s %3.0f%%  %d fetched  %d in flight",
			idW, n.ID, n.State, weightText(n), bar(share, barW/2), 100*share, n.Fetched, n.InflightURLs))
	}
	for _, p := range st.Processors {
		lines = append(lines, fmt.Sprintf("  processor %s: %d processed, %d items, %d waiting, %d batches in flight, %d failed",
			p.Name, p.Processed, p.Items, p.Waiting, p.InFlight, p.Failed))
	}
	for _, r := range st.Rejected {
		lines = append(lines, "rejected signal: "+r)
	}
	return lines
}

func bar(fraction float64, width int) string {
	full := int(fraction*float64(width) + 0.5)
	full = max(0, min(width, full))
	return "[" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "]"
}

// rateMeter is pages per second over the last ten seconds of reports.
type rateMeter struct {
	samples []rateSample
}

type rateSample struct {
	at      time.Time
	fetched int64
}

func (m *rateMeter) add(at time.Time, fetched int64) {
	m.samples = append(m.samples, rateSample{at, fetched})
	for len(m.samples) > 2 && at.Sub(m.samples[0].at) > 10*time.Second {
		m.samples = m.samples[1:]
	}
}

func (m *rateMeter) perSecond() float64 {
	if len(m.samples) < 2 {
		return 0
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.fetched-first.fetched) / dt
}
