package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/store"
)

// openStore connects to Postgres; failing that is exitUnreachable.
func (a *app) openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Connect(ctx, a.cfg)
	return st, unreachableError(err)
}

// dialTemporal connects to Temporal; failing that is exitUnreachable.
func (a *app) dialTemporal(ctx context.Context) (client.Client, error) {
	c, err := control.Dial(ctx, a.cfg, a.logger())
	if err != nil {
		return nil, unreachableError(err)
	}
	return c, nil
}

// campaigns dials Temporal (failing that is exitUnreachable); close the
// client when done. Postgres is read only should a steering command name a
// node the campaign does not know (control.Campaigns.Registry).
func (a *app) campaigns(ctx context.Context) (*control.Campaigns, client.Client, error) {
	c, err := a.dialTemporal(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &control.Campaigns{Client: c, Queue: a.cfg.ControlQueue, Registry: lazyRegistry{a}}, c, nil
}

// lazyRegistry connects to Postgres when first asked for nodes, so that
// commands which do not need it work without it.
type lazyRegistry struct{ a *app }

func (r lazyRegistry) Nodes(ctx context.Context, only []string) ([]campaign.NodeInfo, error) {
	st, err := r.a.openStore(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Nodes(ctx, only)
}

// printJSON writes v to standard output as one line of JSON.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Started is what `campaign start --json` prints: the campaign and its
// run, and with --wait how it ended.
type Started struct {
	CampaignID string            `json:"campaign_id"`
	RunID      string            `json:"run_id"`
	Summary    *campaign.Summary `json:"summary,omitempty"`
	Error      string            `json:"error,omitempty"`
}

// withCampaigns makes a command body that runs with a Temporal connection,
// closed after.
func (a *app) withCampaigns(run func(ctx context.Context, cs *control.Campaigns, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cs, c, err := a.campaigns(cmd.Context())
		if err != nil {
			return err
		}
		defer c.Close()
		return run(cmd.Context(), cs, args)
	}
}

func (a *app) campaignCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "campaign",
		Short: "Start, inspect and steer crawl campaigns",
	}
	cmd.AddCommand(a.startCmd(), a.listCmd(), a.statusCmd(), a.watchCmd(),
		a.addCmd(), a.pauseCmd(), a.resumeCmd(), a.reweightCmd(), a.drainCmd(), a.undrainCmd(),
		a.cancelCmd(), a.retryFailedCmd(), a.exportCmd(), a.scheduleCmd())
	return cmd
}

func (a *app) startCmd() *cobra.Command {
	var o startOptions
	cmd := &cobra.Command{
		Use:   "start [--spec FILE] [--seed URL]... [--id ID] [--wait]",
		Short: "Start a campaign from a JSON spec and/or seed URLs",
		Long: `Start a campaign. The spec is one JSON document; every field but "seeds" has
a default (see docs/spec.md). --seed adds seeds to the spec's.

The same campaign can be started with the Temporal CLI:
  temporal workflow start --type CrawlCampaign --task-queue spiderpool.control \
    --workflow-id my-crawl --input '{"seeds":["http://127.0.0.1:8080/"]}'`,
		Example: `  spiderpool campaign start --seed http://127.0.0.1:8080/ --wait
  spiderpool campaign start --spec crawl.json --id nightly-docs
  echo '{"seeds":["https://example.org/"],"limits":{"max_pages":1000}}' | spiderpool campaign start --spec -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := o.spec(cmd.InOrStdin())
			if err != nil {
				return err
			}
			return a.startCampaign(cmd, spec, o)
		},
	}
	cmd.Flags().StringVar(&o.specFile, "spec", "", "campaign spec JSON file, or - for standard input")
	cmd.Flags().StringArrayVar(&o.seeds, "seed", nil, "seed URL (repeatable)")
	cmd.Flags().StringVar(&o.id, "id", "", "campaign ID, which is also its workflow ID (default: generated)")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the campaign to finish and print its summary")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, `print {"campaign_id","run_id"} as JSON, with --wait its "summary" too`)
	return cmd
}

// startOptions are the flags of `campaign start`.
type startOptions struct {
	specFile string   // a spec file, "-" for standard input, "" for none
	seeds    []string // more seeds
	id       string   // "" generates one
	wait     bool     // wait for the summary
	asJSON   bool
}

// spec is the campaign to start: the spec file's with the seeds added,
// checked; a spec that does not read or check is a usage error.
func (o startOptions) spec(stdin io.Reader) (campaign.Spec, error) {
	spec, err := readSpec(o.specFile, stdin)
	if err != nil {
		return spec, usageError(err)
	}
	spec.Seeds = append(spec.Seeds, o.seeds...)
	if _, err := spec.Normalize(); err != nil {
		return spec, usageError(fmt.Errorf("invalid campaign spec%s:\n%w", source(o.specFile), err))
	}
	return spec, nil
}

// startCampaign starts spec, says so, and with --wait waits for its
// summary.
func (a *app) startCampaign(cmd *cobra.Command, spec campaign.Spec, o startOptions) error {
	id := o.id
	if id == "" {
		id = control.NewCampaignID(time.Now())
	}
	cs, c, err := a.campaigns(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := cs.Start(cmd.Context(), id, spec)
	if err != nil {
		return err
	}
	out := Started{CampaignID: id, RunID: run.GetRunID()}
	if !o.asJSON {
		fmt.Printf("started campaign %s (run %s)\n", id, run.GetRunID())
	}
	if !o.wait {
		if o.asJSON {
			return printJSON(out)
		}
		fmt.Printf("follow it:  spiderpool campaign watch %s\n", id)
		return nil
	}
	return awaitSummary(cmd, run, out, o.asJSON)
}

// awaitSummary waits for the started campaign's summary and prints it; an
// interrupt stops the waiting, not the campaign.
func awaitSummary(cmd *cobra.Command, run client.WorkflowRun, out Started, asJSON bool) error {
	id := out.CampaignID
	var sum campaign.Summary
	if err := run.Get(cmd.Context(), &sum); err != nil {
		if interrupted(cmd) {
			fmt.Fprintf(os.Stderr, "stopped waiting; campaign %s goes on (spiderpool campaign watch %s)\n", id, id)
			return nil
		}
		err = campaignEnded(fmt.Errorf("campaign %s: %w", id, err))
		if asJSON {
			out.Error = err.Error()
			_ = printJSON(out)
		}
		return err
	}
	if asJSON {
		out.Summary = &sum
		return printJSON(out)
	}
	printSummary(os.Stdout, sum)
	return nil
}

func source(file string) string {
	switch file {
	case "":
		return ""
	case "-":
		return " from standard input"
	}
	return " in " + file
}

// readSpec reads the spec file. Only a file that cannot be read, or is not
// JSON, is an error here: a spec's field errors are kept in it, for
// Normalize to report with the rest.
func readSpec(file string, stdin io.Reader) (campaign.Spec, error) {
	if file == "" {
		return campaign.Spec{}, nil
	}
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return campaign.Spec{}, fmt.Errorf("read spec: %w", err)
	}
	spec, err := campaign.ParseSpec(b)
	var syntax *campaign.SyntaxError
	if errors.As(err, &syntax) {
		return spec, fmt.Errorf("invalid campaign spec%s:\n%w", source(file), err)
	}
	return spec, nil
}

func (a *app) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status ID",
		Short:   "Show a running campaign's counters, nodes and ring",
		Example: "  spiderpool campaign status crawl-20261202-143005-9f3a\n  spiderpool campaign status my-crawl --json | jq .counters",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			st, err := cs.Status(ctx, args[0])
			if err != nil {
				return err
			}
			st.RenderWaiting = a.renderWaiting(ctx, args[0])
			if asJSON {
				return printJSON(st)
			}
			printStatus(os.Stdout, st)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// renderWaiting reads from Postgres the campaign's URLs that wait for a
// node with a browser (store.RenderWaiting). The status is the workflow's
// and stands without it: a Postgres this host cannot reach gives 0.
func (a *app) renderWaiting(ctx context.Context, id string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := a.openStore(ctx)
	if err != nil {
		return 0
	}
	defer st.Close()
	key, err := st.CampaignKey(ctx, id)
	if err != nil {
		return 0
	}
	spec, err := st.CampaignSpec(ctx, key)
	if err != nil || spec.Render == nil {
		return 0
	}
	n, _ := st.RenderWaiting(ctx, key, spec.Render, spec.Nodes)
	return n
}

// Steered is what the steering commands print with --json: the campaign,
// what was asked, and the answer (a node's or the campaign's status).
type Steered struct {
	CampaignID string               `json:"campaign_id"`
	Operation  string               `json:"operation"`
	Node       *campaign.NodeStatus `json:"node,omitempty"`
	Status     *campaign.Status     `json:"status,omitempty"`
	// Requeued and Restarted are retry-failed's.
	Requeued  *int  `json:"requeued,omitempty"`
	Restarted *bool `json:"restarted,omitempty"`
	// Added is add's.
	Added *campaign.AddURLsResult `json:"added,omitempty"`
}

func (a *app) cancelCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a campaign; batches in flight hand back what they have not fetched",
		Long: `Cancel a campaign. Batches in flight commit what they fetched and hand back
the rest; the frontier keeps every URL, so starting the campaign again under
the same ID carries on.

Temporal CLI equivalent:
  temporal workflow cancel --workflow-id ID`,
		Example: "  spiderpool campaign cancel my-crawl",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			if err := cs.Cancel(ctx, args[0]); err != nil {
				return err
			}
			if asJSON {
				return printJSON(Steered{CampaignID: args[0], Operation: "cancel"})
			}
			fmt.Printf("%s: cancellation requested\n", args[0])
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func jsonFlag(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, "print the result as JSON")
}

func (a *app) retryFailedCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retry-failed ID",
		Short: "Re-queue a campaign's failed URLs (attempts reset) and fetch them again",
		Long: `Re-queue every URL of the campaign that ended failed, with its attempts reset.
A running campaign picks them up; a finished one is started again under the
same ID with its stored spec, and fetches only what is pending.`,
		Example: "  spiderpool campaign retry-failed my-crawl",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			st, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			n, restarted, err := cs.RetryFailed(ctx, st, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(Steered{CampaignID: args[0], Operation: "retry-failed", Requeued: &n, Restarted: &restarted})
			}
			switch {
			case n == 0:
				fmt.Printf("%s: no failed URLs\n", args[0])
			case restarted:
				fmt.Printf("%s: re-queued %d failed URL(s); the campaign is running again\n", args[0], n)
			default:
				fmt.Printf("%s: re-queued %d failed URL(s); the running campaign picks them up\n", args[0], n)
			}
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func weightText(n campaign.NodeStatus) string {
	if n.Override != nil {
		return strconv.FormatFloat(*n.Override, 'g', -1, 64) + " (set by operator; registered " + strconv.FormatFloat(n.Weight, 'g', -1, 64) + ")"
	}
	return strconv.FormatFloat(n.Weight, 'g', -1, 64)
}

func progressLine(st campaign.Status) string {
	var nodes []string
	for _, n := range st.Nodes {
		nodes = append(nodes, fmt.Sprintf("%s=%d(%s)", n.ID, n.Fetched, n.State))
	}
	c := st.Counters
	return fmt.Sprintf("%-8s fetched %d  failed %d  known %d  in flight %d  %s",
		st.State, c.Fetched, c.Failed, c.Known(), inflight(st), strings.Join(nodes, " "))
}

func inflight(st campaign.Status) int {
	n := 0
	for _, ns := range st.Nodes {
		n += ns.InflightURLs
	}
	return n
}

func printStatus(w io.Writer, st campaign.Status) {
	c := st.Counters
	fmt.Fprintf(w, "campaign %s: %s (run %d)\n", st.CampaignID, st.State, st.Run)
	fmt.Fprintf(w, "fetched %d  failed %d  retried %d  excluded %d  batches %d\n",
		c.Fetched, c.Failed, c.Retried, c.Excluded, c.Batches)
	fmt.Fprintf(w, "URLs known %d: seeds %d  added %d  found by links %d\n\n", c.Known(), c.Seeds, c.Added, c.Discovered)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tWEIGHT\tIN FLIGHT\tBATCHES\tFETCHED\tFAILED")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d URLs / %d\t%d\t%d\t%d\n", n.ID, n.State, weightText(n),
			n.InflightURLs, n.InflightBatches, n.BatchesSent, n.Fetched, n.Failed)
	}
	_ = tw.Flush()
	if len(st.Processors) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESSOR\tPROCESSED\tITEMS\tWAITING\tBATCHES IN FLIGHT\tFAILED\tLAST ERROR")
		for _, p := range st.Processors {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.Processed, p.Items, p.Waiting, p.InFlight, p.Failed, p.LastError)
		}
		_ = tw.Flush()
	}
	if st.RenderWaiting > 0 {
		fmt.Fprintf(w, "render: %s URLs wait for a browser node (start a node with --browser)\n", renderCount(st.RenderWaiting))
	}
	for _, r := range st.Rejected {
		fmt.Fprintf(w, "rejected signal: %s\n", r)
	}
}

func renderCount(n int64) string {
	if n >= store.RenderWaitingCap {
		return fmt.Sprintf("%d+", n)
	}
	return strconv.FormatInt(n, 10)
}

func printSummary(w io.Writer, s campaign.Summary) {
	fmt.Fprintf(w, "\ncampaign %s %s in %.1fs (%d run(s))\n", s.CampaignID, s.Outcome, s.Seconds, s.Runs)
	fmt.Fprintf(w, "  pages fetched  %d  (%.0f pages/s, %.1f MiB)\n", s.Fetched, s.PagesPerSecond, float64(s.Bytes)/(1<<20))
	fmt.Fprintf(w, "  failed         %d\n  excluded       %d\n  still pending  %d\n  URLs in all    %d\n",
		s.Failed, s.Excluded, s.Pending, s.URLs)
	nodes := make([]string, 0, len(s.PerNode))
	for n := range s.PerNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	fmt.Fprintln(w, "  per node:")
	for _, n := range nodes {
		fmt.Fprintf(w, "    %-20s %d\n", n, s.PerNode[n])
	}
}
