// Package observability checks the monitoring that ships with spiderpool
// against a running node: every query of the Grafana dashboard
// (deploy/grafana) names a metric a node exports, or runs on spiderpool's
// Postgres schema; Prometheus scrapes the nodes docker-compose.yml runs;
// the Kubernetes ServiceMonitor selects the nodes' Service and port.
package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// The dashboard, as much of Grafana's JSON model as the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource json.RawMessage `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string     `json:"title"`
	Type       string     `json:"type"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		Datasource datasource `json:"datasource"`
		Expr       string     `json:"expr"`
		RawSQL     string     `json:"rawSql"`
		RefID      string     `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "deploy/grafana/dashboards/spiderpool.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// The panels docs/operations.md names, by title.
var wantPanels = []string{
	"Pages/s per node",
	"Responses by class",
	"Fetch latency",
	"Politeness waits",
	"Frontier by state",
	"Batches in flight",
	"Reroutes: batches handed back",
	"Temporal SDK task latencies",
	"Load per node: pages/s",
	"Load per node: batches in flight",
	"Weight per node",
}

// TestDashboardQueriesNameExportedMetrics is the dashboard's contract: a
// node is run through a campaign and scraped, and every PromQL query of
// every panel names only metrics in that scrape (a renamed metric, or a
// typo, fails here, not as an empty panel in production); every SQL query
// runs on the node's migrated database.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	exported, s, campaignID := scrapeRunningNode(t)

	var titles []string
	checked := 0
	for _, p := range allPanels(d.Panels) {
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ds := tg.Datasource
			if ds.UID == "" {
				ds = p.Datasource
			}
			switch ds.UID {
			case "prometheus":
				names := promMetrics(tg.Expr)
				if len(names) == 0 {
					t.Errorf("panel %q query %s: %q names no metric", p.Title, tg.RefID, tg.Expr)
				}
				for _, n := range names {
					if !exported[n] {
						t.Errorf("panel %q query %s: metric %s is not exported by a running node (query %q)", p.Title, tg.RefID, n, tg.Expr)
					}
				}
			case "postgres":
				sql := expandSQL(tg.RawSQL, campaignID)
				rows, err := s.Store.Pool().Query(bg, sql)
				if err != nil {
					t.Errorf("panel %q query %s does not run on spiderpool's schema: %v\n%s", p.Title, tg.RefID, err, sql)
					continue
				}
				n := 0
				for rows.Next() {
					n++
				}
				if err := rows.Err(); err != nil {
					t.Errorf("panel %q query %s: %v\n%s", p.Title, tg.RefID, err, sql)
				}
				rows.Close()
				if n == 0 {
					t.Errorf("panel %q query %s returns nothing for a campaign that ran:\n%s", p.Title, tg.RefID, sql)
				}
			default:
				t.Errorf("panel %q query %s: datasource %+v is neither provisioned datasource (prometheus, postgres)", p.Title, tg.RefID, ds)
			}
			checked++
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query  string `json:"query"`
				RawSQL string `json:"rawSql"`
			}
			_ = json.Unmarshal(v.Query, &obj)
			q = obj.Query + obj.RawSQL
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			if !exported[m[1]] {
				t.Errorf("variable %s: metric %s is not exported", v.Name, m[1])
			}
		} else if _, err := s.Store.Pool().Exec(bg, expandSQL(q, campaignID)); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	for _, w := range wantPanels {
		if !slices.Contains(titles, w) {
			t.Errorf("no panel %q; panels: %q", w, titles)
		}
	}
	t.Logf("%d panels, %d queries checked against %d metric names a node exported", len(titles), checked, len(exported))
}

// scrapeRunningNode runs a node with its metrics served through a small
// campaign (pages, a dead link, a transient failure), then scrapes it.
// It returns every name a query can use (a histogram's _bucket, _sum and
// _count), the stack and the campaign's ID.
func scrapeRunningNode(t *testing.T) (map[string]bool, *harness.Stack, string) {
	t.Helper()
	web, err := synthweb.Start(synthweb.Config{Hosts: 3, Pages: 90, LinksPerPage: 4, CrossHostFraction: 0.3, Seed: 9,
		DeadLinkFraction: 0.05, TransientFraction: 0.05, TransientAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(web.Close)
	s := harness.NewStack(t)
	// Both nodes are scraped, and the test reads what the two export
	// together: which of them gets the campaign's hosts, or runs its
	// workflow tasks, is the hash's and Temporal's choice (node a alone had
	// fetched nothing in one CI run).
	var addrs []string
	node := func(short string, weight float64) string {
		port, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		addrs = append(addrs, addr)
		return s.StartNodeWith(short, weight, func(c *config.Config) { c.Node.MetricsAddr = addr })
	}
	a := node("a", 1)
	node("b", 2)
	id := "observed-" + s.Name
	spec := campaign.Spec{
		Seeds:      []string{web.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(5 * time.Millisecond), MaxConcurrencyPerHost: 2},
		Retry:      campaign.Retry{InitialInterval: campaign.Duration(50 * time.Millisecond)},
		Dispatch:   campaign.Dispatch{BatchSize: 20},
	}
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	s.Campaigns.Registry = s.Store                                // so the reweight waits for the campaign to take node a
	if _, err := s.Campaigns.Reweight(bg, id, a, 3); err != nil { // a ring change, for the weight panel
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	var fams map[string]*dto.MetricFamily
	// The SDK records a workflow task's latency when it completes it; the
	// last one may land a moment after the result.
	harness.Eventually(t, time.Minute, "the nodes to have fetched pages and run workflow tasks", func() bool {
		fams = map[string]*dto.MetricFamily{}
		for _, addr := range addrs {
			maps.Copy(fams, harness.ScrapeMetrics(t, addr))
		}
		return fams["spiderpool_responses_total"] != nil && fams["temporal_workflow_task_execution_latency_seconds"] != nil
	})
	names := map[string]bool{}
	for name, f := range fams {
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		}
	}
	if os.Getenv("SPIDERPOOL_LIST_METRICS") != "" {
		var all []string
		for n := range fams {
			all = append(all, n)
		}
		sort.Strings(all)
		t.Logf("a node exports:\n%s", strings.Join(all, "\n"))
	}
	return names, s, id
}

var (
	labelValues  = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]|\boffset\s+-?[0-9a-zA-Z]+`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVars     = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promNumber   = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// promMetrics lists the metric names a PromQL expression selects: its
// identifiers less functions (followed by "("), keywords, label matchers,
// grouping labels, ranges, strings and Grafana variables.
func promMetrics(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promVars.ReplaceAllString(e, " ")
	e = promNumber.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promKeywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func TestPromMetricsFindsTheSelectors(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (node) (rate(spiderpool_urls_total{state="fetched", node=~"$node"}[$__rate_interval]))`: "spiderpool_urls_total",
		`histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m]))) / on(node) group_left b`:            "a_bucket b",
		`sum(spiderpool_batches_in_flight) or vector(0)`:                                                "spiderpool_batches_in_flight",
		`1 - x offset 5m > bool 0.5`: "x",
	} {
		if got := strings.Join(promMetrics(expr), " "); got != want {
			t.Errorf("promMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// expandSQL substitutes the Grafana macros and variables the dashboard's
// SQL uses, as Grafana would for the last hour and one campaign.
func expandSQL(sql, campaignID string) string {
	timeFilter := regexp.MustCompile(`\$__timeFilter\(([^)]+)\)`)
	sql = timeFilter.ReplaceAllString(sql, "$1 > now() - interval '1 hour'")
	sql = strings.NewReplacer(
		"$__timeFrom()", "(now() - interval '1 hour')",
		"$__timeTo()", "now()",
		"'$campaign'", "'"+campaignID+"'",
		"${campaign}", campaignID,
		"$campaign", campaignID,
	).Replace(sql)
	return sql
}
