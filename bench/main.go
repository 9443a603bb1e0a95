// Command bench measures spiderpool against Colly on the same synthetic
// web in the same run: `make bench`. It is its own module so that Colly
// never becomes a dependency of spiderpool.
//
//	bench run     alternate spiderpool and Colly crawls, write results.json
//	bench scale   spiderpool alone at several sizes
//	bench polite  politeness efficiency: many hosts, slow hosts, campaigns sharing nodes or hosts
//	bench render  one browser node against Crawlee's PuppeteerCrawler on a single-page app
//	bench frontier  plans and latency of a lease over a 10M-row frontier
//	bench micro   the hot-path microbenchmarks (go test -bench)
//	bench serve   the synthetic web as a process, with counters (internal)
//	bench colly   one Colly crawl as a process (internal)
//	bench readme  regenerate docs/performance.md's generated section from results.json
package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// envCPUProfile names a file: BENCH_CPUPROFILE=FILE profiles the bench's
// own process (the no-op processor and the Temporal client it runs on)
// for the whole command. The nodes serve their own profiles (see
// BENCH_PPROF_BASE).
const envCPUProfile = "BENCH_CPUPROFILE"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench run|scale|polite|nodes|render|frontier|micro|serve|colly|readme [flags]")
		os.Exit(2)
	}
	if f := os.Getenv(envCPUProfile); f != "" && os.Args[1] != "serve" && os.Args[1] != "colly" {
		out, err := os.Create(f)
		if err == nil {
			err = pprof.StartCPUProfile(out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", envCPUProfile, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCompare(os.Args[2:])
	case "scale":
		err = runScale(os.Args[2:])
	case "polite":
		err = runPolite(os.Args[2:])
	case "nodes":
		err = runNodes(os.Args[2:])
	case "render":
		err = runRender(os.Args[2:])
	case "frontier":
		err = runFrontier(os.Args[2:])
	case "micro":
		err = runMicro(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "colly":
		err = collyCrawl(os.Args[2:])
	case "readme":
		err = readme(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
