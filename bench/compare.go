package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// results is bench/results.json: what docs/performance.md
// is made from.
type results struct {
	Date    string        `json:"date"`
	Machine string        `json:"machine"`
	Compare *compareRun   `json:"compare,omitempty"`
	Scale   []scalePoint  `json:"scale,omitempty"`
	Micro   []microResult `json:"micro,omitempty"`
	Polite  *politeRun    `json:"polite,omitempty"`
	Nodes   *nodesRun     `json:"nodes,omitempty"`
	Render  *renderRun    `json:"render,omitempty"`
}

type compareRun struct {
	Pages       int         `json:"pages"`
	Hosts       int         `json:"hosts"`
	Links       int         `json:"links_per_page"`
	Parallelism int         `json:"parallelism"`
	Pairs       []benchPair `json:"pairs"`
	// Ratio is median(spiderpool pages/s) / median(Colly pages/s).
	Ratio float64 `json:"ratio"`
	// ProcessorRatio is median(spiderpool with a no-op processor pages/s)
	// / median(spiderpool pages/s), measured in the same pairs.
	ProcessorRatio float64 `json:"processor_ratio,omitempty"`
	// Processor is the no-op processor's settings.
	Processor string `json:"processor,omitempty"`
}

type benchPair struct {
	Spiderpool measured `json:"spiderpool"`
	Colly      measured `json:"colly"`
	// WithProcessor is spiderpool with every page also sent to a no-op
	// processor.
	WithProcessor *measured `json:"with_processor,omitempty"`
}

type measured struct {
	Pages            int64   `json:"pages"`
	Seconds          float64 `json:"seconds"`
	PagesPerSecond   float64 `json:"pages_per_second"`
	Duplicates       int     `json:"duplicate_fetches"`
	Missing          int     `json:"pages_missed"`
	PeakRSSMB        float64 `json:"peak_rss_mb"`
	Runs             int     `json:"workflow_runs,omitempty"`
	MaxHistoryEvents int64   `json:"max_history_events,omitempty"`
}

type scalePoint struct {
	Pages int `json:"pages"`
	measured
	// VsSmallest is pages/s relative to the smallest size measured.
	VsSmallest float64 `json:"vs_smallest"`
}

func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

func loadResults(path string) results {
	var r results
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &r)
	}
	return r
}

func saveResults(path string, r results) error {
	r.Date, r.Machine = time.Now().UTC().Format(time.RFC3339), machine()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func measure(r crawlResult, s webStats) measured {
	return measured{Pages: r.Pages, Seconds: r.Seconds, PagesPerSecond: float64(r.Pages) / r.Seconds,
		Duplicates: s.Duplicates, Missing: s.Missing, PeakRSSMB: r.PeakRSSMB}
}

// runCompare alternates spiderpool and Colly crawls of one web.
func runCompare(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var wf webFlags
	wf.bind(fs, 100_000)
	pairs := fs.Int("pairs", 3, "spiderpool/Colly pairs, alternating")
	nodes := fs.Int("nodes", 3, "spiderpool nodes")
	conc := fs.Int("concurrency", 16, "requests in flight per spiderpool node; Colly gets nodes x this")
	bin := fs.String("spiderpool", "../bin/spiderpool", "the spiderpool binary")
	out := fs.String("out", "results.json", "results file")
	withProc := fs.Bool("processor", true, "also crawl with a no-op processor in each pair")
	withColly := fs.Bool("colly", true, "crawl with Colly in each pair (off: a quicker look at spiderpool alone)")
	fs.Parse(args)

	web, err := startWeb(wf)
	if err != nil {
		return err
	}
	defer web.stop()
	st, err := startStack(*bin, equalNodes(*nodes, *conc))
	if err != nil {
		return err
	}
	defer st.stop()
	c := &comparison{web: web, st: st, parallelism: *nodes * *conc, colly: *withColly, processor: *withProc}
	cr := &compareRun{Pages: wf.pages, Hosts: wf.hosts, Links: wf.links, Parallelism: c.parallelism}
	for i := range *pairs {
		pair, err := c.pair(i + 1)
		if err != nil {
			return err
		}
		cr.Pairs = append(cr.Pairs, pair)
	}
	cr.summarize(c.colly)
	r := loadResults(*out)
	r.Compare = cr
	return saveResults(*out, r)
}

// comparison is the crawls of a `bench run`: each pair crawls the web
// with spiderpool, then with Colly and with spiderpool and a no-op
// processor when they are on.
type comparison struct {
	web              *webProcess
	st               *stack
	parallelism      int // Colly's: the spiderpool nodes' requests in flight
	colly, processor bool
}

// pair is the n-th pair's crawls.
func (c *comparison) pair(n int) (benchPair, error) {
	var pair benchPair
	m, err := c.spiderpool(false)
	if err != nil {
		return pair, fmt.Errorf("spiderpool run %d: %w", n, err)
	}
	pair.Spiderpool = m
	fmt.Printf("pair %d  spiderpool %8.0f pages/s  %6d pages  %5d duplicates  %3d missed  %6.0f MiB RSS (3 nodes)  %d run(s), max %d events\n",
		n, m.PagesPerSecond, m.Pages, m.Duplicates, m.Missing, m.PeakRSSMB, m.Runs, m.MaxHistoryEvents)
	printStatementStats(c.st)
	if c.colly {
		if pair.Colly, err = c.crawlColly(); err != nil {
			return pair, fmt.Errorf("colly run %d: %w", n, err)
		}
		m := pair.Colly
		fmt.Printf("pair %d  colly      %8.0f pages/s  %6d pages  %5d duplicates  %3d missed  %6.0f MiB RSS\n",
			n, m.PagesPerSecond, m.Pages, m.Duplicates, m.Missing, m.PeakRSSMB)
	}
	if c.processor {
		m, err := c.spiderpool(true)
		if err != nil {
			return pair, fmt.Errorf("spiderpool with a processor, run %d: %w", n, err)
		}
		pair.WithProcessor = &m
		fmt.Printf("pair %d  +processor %8.0f pages/s  %6d pages  %5d duplicates  %3d missed  %6.0f MiB RSS  %d run(s), max %d events\n",
			n, m.PagesPerSecond, m.Pages, m.Duplicates, m.Missing, m.PeakRSSMB, m.Runs, m.MaxHistoryEvents)
		printStatementStats(c.st)
	}
	return pair, nil
}

// spiderpool crawls the web afresh with spiderpool, every page also to a
// no-op processor if noop.
func (c *comparison) spiderpool(noop bool) (measured, error) {
	if err := c.web.reset(); err != nil {
		return measured{}, err
	}
	s, err := c.st.crawl(c.web.seed, 64, noop)
	if err != nil {
		return measured{}, err
	}
	stats, err := c.web.stats()
	if err != nil {
		return measured{}, err
	}
	m := measure(s.crawlResult, stats)
	m.Runs, m.MaxHistoryEvents = s.Runs, s.MaxHistoryEvents
	return m, nil
}

// crawlColly crawls the web afresh with Colly.
func (c *comparison) crawlColly() (measured, error) {
	if err := c.web.reset(); err != nil {
		return measured{}, err
	}
	r, err := runColly(c.web.seed, c.parallelism)
	if err != nil {
		return measured{}, err
	}
	stats, err := c.web.stats()
	if err != nil {
		return measured{}, err
	}
	return measure(r, stats), nil
}

// summarize sets and prints the medians' ratios: spiderpool to Colly
// (when the pairs crawled with Colly), and with the processor to without.
func (cr *compareRun) summarize(colly bool) {
	var sp, co, pr []float64
	for _, p := range cr.Pairs {
		sp = append(sp, p.Spiderpool.PagesPerSecond)
		if colly {
			co = append(co, p.Colly.PagesPerSecond)
		}
		if p.WithProcessor != nil {
			pr = append(pr, p.WithProcessor.PagesPerSecond)
		}
	}
	if len(co) > 0 {
		cr.Ratio = median(sp) / median(co)
		fmt.Printf("\nmedian pages/s: spiderpool %.0f, Colly %.0f; spiderpool/Colly = %.2f\n", median(sp), median(co), cr.Ratio)
	}
	if len(pr) > 0 {
		cr.ProcessorRatio = median(pr) / median(sp)
		cr.Processor = noopSettings()
		fmt.Printf("median pages/s with a no-op processor (%s): %.0f; with/without = %.2f\n",
			cr.Processor, median(pr), cr.ProcessorRatio)
	}
}

// runScale crawls webs of several sizes with spiderpool alone.
func runScale(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	sizes := fs.String("sizes", "10000,100000,1000000", "web sizes in pages")
	hosts := fs.Int("hosts", 50, "hosts")
	links := fs.Int("links", 20, "links per page")
	nodes := fs.Int("nodes", 3, "spiderpool nodes")
	conc := fs.Int("concurrency", 16, "requests in flight per node")
	bin := fs.String("spiderpool", "../bin/spiderpool", "the spiderpool binary")
	out := fs.String("out", "results.json", "results file")
	fs.Parse(args)
	st, err := startStack(*bin, equalNodes(*nodes, *conc))
	if err != nil {
		return err
	}
	defer st.stop()
	var points []scalePoint
	for _, f := range strings.Split(*sizes, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
			return fmt.Errorf("bad size %q", f)
		}
		web, err := startWeb(webFlags{pages: n, hosts: *hosts, links: *links})
		if err != nil {
			return err
		}
		s, err := st.crawl(web.seed, 64, false)
		if err != nil {
			web.stop()
			return fmt.Errorf("spiderpool at %d pages: %w", n, err)
		}
		printStatementStats(st)
		stats, err := web.stats()
		web.stop()
		if err != nil {
			return err
		}
		p := scalePoint{Pages: n, measured: measure(s.crawlResult, stats)}
		p.Runs, p.MaxHistoryEvents = s.Runs, s.MaxHistoryEvents
		if len(points) > 0 {
			p.VsSmallest = p.PagesPerSecond / points[0].PagesPerSecond
		} else {
			p.VsSmallest = 1
		}
		points = append(points, p)
		fmt.Printf("%8d pages  %8.0f pages/s (x%.2f of the smallest)  %5d duplicates  %3d missed  %6.0f MiB RSS (3 nodes)  %d run(s), max %d events\n",
			n, p.PagesPerSecond, p.VsSmallest, stats.Duplicates, stats.Missing, p.PeakRSSMB, p.Runs, p.MaxHistoryEvents)
	}
	if len(points) == 0 {
		return errors.New("no sizes")
	}
	r := loadResults(*out)
	r.Scale = points
	return saveResults(*out, r)
}
