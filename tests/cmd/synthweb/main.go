// Command synthweb serves a synthetic web on loopback for trying spiderpool
// by hand: it prints the seed URL and serves until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func main() {
	var cfg synthweb.Config
	flag.IntVar(&cfg.Hosts, "hosts", 20, "hosts, each its own 127.0.0.1 port")
	flag.IntVar(&cfg.Pages, "pages", 5000, "pages in all")
	flag.IntVar(&cfg.LinksPerPage, "links", 10, "extra links per page")
	flag.Float64Var(&cfg.CrossHostFraction, "cross-host", 0.3, "fraction of links to other hosts")
	flag.DurationVar(&cfg.Latency, "latency", 0, "delay of every response")
	flag.Int64Var(&cfg.Seed, "seed", 1, "link graph seed")
	flag.Parse()
	web, err := synthweb.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "synthweb:", err)
		os.Exit(1)
	}
	defer web.Close()
	fmt.Printf("serving %d pages over %d hosts; seed %s\n", cfg.Pages, cfg.Hosts, web.Seed())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Printf("served %d requests\n", web.Requests())
}
