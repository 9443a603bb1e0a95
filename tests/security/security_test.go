// Package security tests who may read what a node serves: page bodies and
// batches only with the node secret, each token its own page only, pprof
// only when asked for, and nothing in a campaign's Temporal history that
// opens a body by itself.
package security

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

// listenerFlags are the node's listeners, by the variable that sets each.
var listenerFlags = map[string]string{
	"SPIDERPOOL_METRICS_ADDR": "--metrics-addr",
	"SPIDERPOOL_BODIES_ADDR":  "--bodies-addr",
	"SPIDERPOOL_PPROF":        "--pprof",
}

// strangerRequests are what someone without the secret might try on any
// listener of a node: bodies by token (one and many), a batch, pprof.
var strangerRequests = []struct{ method, path, body string }{
	{http.MethodGet, activities.BodyPath + strings.Repeat("ab", 32), ""},
	{http.MethodPost, activities.BodyPath, `["` + strings.Repeat("ab", 32) + `"]`},
	{http.MethodGet, activities.BatchPath + strings.Repeat("cd", 16), ""},
	{http.MethodGet, "/debug/pprof/", ""},
	{http.MethodGet, "/debug/pprof/cmdline", ""},
}

func ask(t *testing.T, method, url, body, secret string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// renderedNodes are the node settings the deploy files give, by where
// they come from: the environment of docker compose's first node as
// compose renders it (harness.LoadCompose), and of the Kubernetes
// StatefulSet's node container.
func renderedNodes(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}

	project, err := harness.LoadCompose(t, "docker-compose.yml")
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(project.Services)) {
		svc := project.Services[name]
		if len(svc.Command) == 0 || svc.Command[0] != "worker" {
			continue
		}
		env := svc.Environment.ToMapping()
		bodies := env["SPIDERPOOL_BODIES_ADDR"]
		for _, p := range svc.Ports {
			if bodies != "" && strings.HasSuffix(bodies, ":"+strconv.FormatUint(uint64(p.Target), 10)) {
				t.Errorf("compose publishes node %s's bodies port %d: processors reach it inside the network", name, p.Target)
			}
		}
		if env[config.EnvNodeSecretFile] == "" && env[config.EnvNodeSecret] == "" {
			t.Errorf("compose node %s has no node secret", name)
		}
		if out["compose"] == nil { // the first node by name
			out["compose"] = env
		}
	}

	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy", "kubernetes", "spiderpool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string `yaml:"name"`
							Env  []struct {
								Name  string `yaml:"name"`
								Value string `yaml:"value"`
							} `yaml:"env"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind != "StatefulSet" {
			continue
		}
		for _, c := range doc.Spec.Template.Spec.Containers {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			out["kubernetes"] = env
		}
	}
	for _, from := range []string{"compose", "kubernetes"} {
		if out[from] == nil {
			t.Fatalf("no node in the %s files", from)
		}
	}
	return out
}

// TestDeployedNodesServeNothingToStrangers: a node started with the
// listener settings docker compose and the Kubernetes manifest give it
// (on loopback ports here) answers a request without the node secret
// for bodies, batches or pprof with 401 or 404 on every listener it opens,
// and opens no pprof listener; with the secret its bodies listener lets
// the request through.
func TestDeployedNodesServeNothingToStrangers(t *testing.T) {
	s := harness.NewStack(t)
	secret := os.Getenv(config.EnvNodeSecret)
	for from, env := range renderedNodes(t) {
		t.Run(from, func(t *testing.T) {
			if env["SPIDERPOOL_PPROF"] != "" {
				t.Errorf("%s nodes serve pprof (%s): want it off", from, env["SPIDERPOOL_PPROF"])
			}
			if env["SPIDERPOOL_BODIES_ADDR"] == "" {
				t.Errorf("%s nodes serve no bodies: processors get them inline, or not at all", from)
			}
			var flags []string
			listeners := map[string]string{} // variable -> loopback address
			for _, v := range slices.Sorted(maps.Keys(listenerFlags)) {
				if env[v] == "" {
					continue
				}
				port, err := devstack.FreePort()
				if err != nil {
					t.Fatal(err)
				}
				addr := fmt.Sprintf("127.0.0.1:%d", port)
				listeners[v] = addr
				flags = append(flags, listenerFlags[v], addr)
			}
			s.StartNodeProcess(from, 1, flags...)
			for v, addr := range listeners {
				for _, r := range strangerRequests {
					code, _ := ask(t, r.method, "http://"+addr+r.path, r.body, "")
					if code != http.StatusUnauthorized && code != http.StatusNotFound {
						t.Errorf("%s (%s) %s %s without the secret: %d, want 401 or 404", v, addr, r.method, r.path, code)
					}
				}
			}
			if addr := listeners["SPIDERPOOL_BODIES_ADDR"]; addr != "" {
				if code, _ := ask(t, http.MethodGet, "http://"+addr+strangerRequests[0].path, "", secret); code != http.StatusNotFound {
					t.Errorf("GET a body that is not there, with the secret: %d, want 404 (past the secret)", code)
				}
			}
		})
	}
}

// recorder keeps what a processor got: the URL and body token of every
// page, and the body, when the processor read it.
type recorder struct {
	mu     sync.Mutex
	urls   []string
	tokens []string
	bodies map[string][]byte
}

func (r *recorder) add(url string, ref *campaign.BodyRef, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, url)
	if ref != nil {
		r.tokens = append(r.tokens, ref.Token)
	}
	if body != nil {
		r.bodies[url] = slices.Clone(body)
	}
}

// runReader runs a processor written with package processor, which reads
// every page's body from the nodes with the secret from the environment.
func (r *recorder) runReader(t *testing.T, s *harness.Stack, name, queue string) {
	p := processor.New(name).Queue(queue).OnPage(func(pg *processor.Page) error {
		r.add(pg.URL, pg.BodyRef, pg.Body)
		return nil
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })
}

// runHolder runs a processor that notes every page of a batch as it comes
// and keeps the batch until hold is closed, so its bodies stay alive.
func (r *recorder) runHolder(t *testing.T, s *harness.Stack, name, queue string, hold chan struct{}) {
	w := worker.New(s.Client, queue, worker.Options{})
	w.RegisterActivityWithOptions(func(ctx context.Context, req campaign.ProcessRequest) (campaign.ProcessResult, error) {
		var out campaign.ProcessResult
		for _, pg := range req.Pages {
			r.add(pg.URL, pg.BodyRef, nil)
			out.Pages = append(out.Pages, campaign.PageResult{Key: pg.Key})
		}
		select {
		case <-hold:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}, activity.RegisterOptions{Name: name})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

func (r *recorder) snapshot() (urls, tokens []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.urls), slices.Clone(r.tokens)
}

// historyBytes is every event of the campaign's workflow and of its
// children (ProcessBatch), as protobuf wire bytes: payloads (JSON) appear
// in them as they are, so what a reader of the Web UI could read is in
// them.
func historyBytes(t *testing.T, s *harness.Stack, workflowID string) []byte {
	t.Helper()
	var out []byte
	queue := []string{workflowID}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		it := s.Client.GetWorkflowHistory(bg, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatalf("history of %s: %v", id, err)
			}
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
			if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
				queue = append(queue, a.GetWorkflowId())
			}
		}
	}
	return out
}

var bodyToken = regexp.MustCompile(`[0-9a-f]{64}`)

// sameChunk is two of tokens whose pages share a chunk (the token's first
// 16 characters), or "" if none do.
func sameChunk(tokens []string) (one, other string) {
	for i, a := range tokens {
		for _, b := range tokens[i+1:] {
			if a[:16] == b[:16] {
				return a, b
			}
		}
	}
	return "", ""
}

// TestProcessorsReadOnlyTheirOwnPages: two processors with the node
// secret, each wanting half of a web's pages, get their own pages and only
// those; a token whose page id is changed to another live page's gets
// 404, as does one page's token with another's page secret; and the
// campaign's history, children included, holds no node secret, and every
// body token in it, alive, opens nothing without the secret.
func TestProcessorsReadOnlyTheirOwnPages(t *testing.T) {
	s := harness.NewStack(t)
	secret := os.Getenv(config.EnvNodeSecret)
	s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.BodiesAddr = "127.0.0.1:0" })
	servers, err := s.Store.BodyServers(bg)
	if err != nil || len(servers) != 1 {
		t.Fatalf("body servers %v, %v: want the node's", servers, err)
	}
	bodiesURL := "http://" + servers[0] + activities.BodyPath
	web, err := synthweb.Start(synthweb.Config{Hosts: 1, Pages: 200, LinksPerPage: 8, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(web.Close)

	even := `/p/[0-9]*[02468]\.html$`
	mine, theirs := &recorder{bodies: map[string][]byte{}}, &recorder{bodies: map[string][]byte{}}
	hold := make(chan struct{})
	held := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(held)
	mine.runReader(t, s, "mine", s.Name+".mine")
	theirs.runHolder(t, s, "theirs", s.Name+".theirs", hold)
	proc := func(name string) campaign.Processor {
		return campaign.Processor{Name: name, TaskQueue: s.Name + "." + name, Activity: name, BatchSize: 5,
			Bodies: campaign.BodiesReference, Timeout: campaign.Duration(4 * time.Minute)}
	}
	p1, p2 := proc("mine"), proc("theirs")
	p1.Include, p2.Exclude = []string{even}, []string{even}
	// Eight requests at once to the one host: pages fetched together are
	// committed together, their bodies in one chunk.
	r, err := s.Campaigns.Start(bg, "secrets", campaign.Spec{Seeds: []string{web.Seed()},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 8}, Processors: []campaign.Processor{p1, p2}})
	if err != nil {
		t.Fatal(err)
	}

	// Theirs holds batches (their bodies alive), two of its pages from
	// one chunk among them; mine has had one. The first batch may hold
	// the seed alone, committed before anything beside it: theirs has a
	// window of 4, and the batches after it come from commits of 8.
	harness.Eventually(t, 2*time.Minute, "mine to get pages, and theirs to hold two of one chunk", func() bool {
		_, tm := mine.snapshot()
		_, tt := theirs.snapshot()
		one, _ := sameChunk(tt)
		return len(tm) > 0 && one != ""
	})
	_, tm := mine.snapshot()
	_, tt := theirs.snapshot()
	mineTok, theirTok := tm[0], tt[0]
	if code, _ := ask(t, http.MethodGet, bodiesURL+theirTok, "", secret); code != http.StatusOK {
		t.Fatalf("a held page's own token, with the secret: %d, want 200", code)
	}
	if code, _ := ask(t, http.MethodGet, bodiesURL+theirTok, "", ""); code != http.StatusUnauthorized {
		t.Errorf("a held page's own token, without the secret: %d, want 401", code)
	}
	// Two held pages of one chunk, both bodies there: the chunk's secret
	// would open either with the other's token, a page's secret must not.
	one, other := sameChunk(tt)
	if code, _ := ask(t, http.MethodGet, bodiesURL+other, "", secret); code != http.StatusOK {
		t.Fatalf("a held page's own token, with the secret: %d, want 200", code)
	}
	for what, forged := range map[string]string{
		"mine's token, its page id changed to theirs":            mineTok[:16] + theirTok[16:32] + mineTok[32:],
		"theirs' page with mine's page secret":                   theirTok[:32] + mineTok[32:],
		"a held token, its page id changed to its chunk's other": one[:16] + other[16:32] + one[32:],
	} {
		if code, body := ask(t, http.MethodGet, bodiesURL+forged, "", secret); code != http.StatusNotFound {
			t.Errorf("%s, with the secret: %d (%d bytes), want 404", what, code, len(body))
		}
	}

	hist := historyBytes(t, s, "secrets")
	if bytes.Contains(hist, []byte(secret)) {
		t.Error("the campaign's history holds the node secret")
	}
	tokens := map[string]bool{}
	for _, m := range bodyToken.FindAll(hist, -1) {
		tokens[string(m)] = true
	}
	alive := 0
	for tok := range tokens {
		if code, _ := ask(t, http.MethodGet, bodiesURL+tok, "", ""); code != http.StatusUnauthorized {
			t.Errorf("token %s… from the history, without the secret: %d, want 401", tok[:12], code)
		}
		if code, _ := ask(t, http.MethodGet, bodiesURL+tok, "", secret); code == http.StatusOK {
			alive++
		}
	}
	if !tokens[theirTok] || alive == 0 {
		t.Errorf("%d tokens in the history, %d of them alive, the held page's among them %v: want it there and alive, or this proves nothing",
			len(tokens), alive, tokens[theirTok])
	}

	held()
	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := r.Get(ctx, &sum); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	mu, _ := mine.snapshot()
	tu, _ := theirs.snapshot()
	isEven := regexp.MustCompile(even)
	for _, u := range mu {
		if !isEven.MatchString(u) {
			t.Errorf("mine got %s, a page only theirs wants", u)
		}
	}
	for _, u := range tu {
		if isEven.MatchString(u) {
			t.Errorf("theirs got %s, a page only mine wants", u)
		}
	}
	if got := int64(len(mu) + len(tu)); got != sum.Fetched {
		t.Errorf("mine got %d pages and theirs %d, of %d fetched: want every page to one of them", len(mu), len(tu), sum.Fetched)
	}
	for u, body := range mine.bodies {
		code, want := ask(t, http.MethodGet, u, "", "")
		if code != http.StatusOK || !bytes.Equal(body, want) {
			t.Errorf("mine's body of %s (%d bytes) is not the page (%d, %d bytes)", u, len(body), code, len(want))
		}
	}
}
