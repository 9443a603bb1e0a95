package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"

	"github.com/spiderpool/spiderpool/devstack"
)

// crawlResult is one crawler's run as `bench colly` reports it.
type crawlResult struct {
	Pages     int64   `json:"pages"`
	Seconds   float64 `json:"seconds"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// collyCrawl crawls the web the way Colly's documentation does it: async
// collector, one limit rule for all domains, links followed from
// a[href] in OnHTML.
func collyCrawl(args []string) error {
	fs := flag.NewFlagSet("colly", flag.ExitOnError)
	seed := fs.String("seed", "", "seed URL")
	parallelism := fs.Int("parallelism", 48, "requests in flight")
	fs.Parse(args)

	c := colly.NewCollector(colly.Async(true), colly.MaxDepth(0))
	if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: *parallelism}); err != nil {
		return err
	}
	c.SetRequestTimeout(30 * time.Second)
	var pages atomic.Int64
	c.OnResponse(func(*colly.Response) { pages.Add(1) })
	c.OnHTML("a[href]", func(e *colly.HTMLElement) { _ = e.Request.Visit(e.Attr("href")) })
	start := time.Now()
	if err := c.Visit(*seed); err != nil {
		return err
	}
	c.Wait()
	rss, _ := devstack.PeakRSS(os.Getpid())
	res := crawlResult{Pages: pages.Load(), Seconds: time.Since(start).Seconds(), PeakRSSMB: float64(rss) / (1 << 20)}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// runColly crawls once with Colly in its own process.
func runColly(seed string, parallelism int) (crawlResult, error) {
	self, err := os.Executable()
	if err != nil {
		return crawlResult{}, err
	}
	out, err := exec.Command(self, "colly", "-seed", seed, "-parallelism", strconv.Itoa(parallelism)).Output()
	if err != nil {
		return crawlResult{}, fmt.Errorf("colly: %w", err)
	}
	var r crawlResult
	return r, json.Unmarshal(out, &r)
}
