package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// webFlags are the synthetic web's shape, shared by run, scale and serve.
type webFlags struct {
	pages, hosts, links int
}

func (w *webFlags) bind(fs *flag.FlagSet, pages int) {
	fs.IntVar(&w.pages, "pages", pages, "pages of the synthetic web")
	fs.IntVar(&w.hosts, "hosts", 50, "hosts of the synthetic web")
	fs.IntVar(&w.links, "links", 20, "links per page")
}

// serve runs the synthetic web and an admin endpoint: GET /stats gives the
// request counters, POST /reset clears them.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var wf webFlags
	wf.bind(fs, 100_000)
	fs.Parse(args)
	web, err := synthweb.Start(synthweb.Config{
		Hosts: wf.hosts, Pages: wf.pages, LinksPerPage: wf.links, CrossHostFraction: 0.2, Seed: 2026, CountOnly: true,
		// Colly keeps fragments in its visited set (colly v2 hashes
		// Href(false)), so "/p#a" and "/p#b" would be two pages to it.
		PlainLinks: true,
	})
	if err != nil {
		return err
	}
	defer web.Close()
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		missing, dups := web.Tally()
		json.NewEncoder(w).Encode(webStats{Requests: web.Requests(), Missing: missing, Duplicates: dups, Pages: len(web.Pages())})
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) { web.Reset() })
	go http.Serve(admin, mux)
	fmt.Printf("seed %s admin http://%s\n", web.Seed(), admin.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

type webStats struct {
	Pages      int `json:"pages"`
	Requests   int `json:"requests"`
	Missing    int `json:"missing"`
	Duplicates int `json:"duplicates"`
}

// webProcess is the synthetic web running as `bench serve`.
type webProcess struct {
	cmd   *exec.Cmd
	seed  string
	admin string
}

func startWeb(wf webFlags) (*webProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "serve", fmt.Sprint("-pages=", wf.pages), fmt.Sprint("-hosts=", wf.hosts), fmt.Sprint("-links=", wf.links))
	devstack.DieWithParent(cmd, syscall.SIGKILL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("synthetic web: %w", err)
	}
	var p webProcess
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "seed %s admin %s", &p.seed, &p.admin); err != nil {
		return nil, fmt.Errorf("synthetic web said %q", line)
	}
	p.cmd = cmd
	return &p, nil
}

func (p *webProcess) reset() error {
	resp, err := http.Post(p.admin+"/reset", "", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (p *webProcess) stats() (webStats, error) {
	var s webStats
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Get(p.admin + "/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return s, errors.New(resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (p *webProcess) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
}
