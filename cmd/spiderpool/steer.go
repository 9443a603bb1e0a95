package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
)

// The commands that change a running campaign. Each is an update: the
// workflow validates it and answers, so an unknown node or a bad weight is
// an error here and changes nothing. Each also exists as a signal of the
// same name for the Temporal CLI, shown in its help; a rejected signal is
// listed in `status`. Every ring change is recorded in node_weight_history.

func (a *app) pauseCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Stop handing out new batches; batches in flight finish",
		Long: `Pause a campaign: no new batches are leased; those in flight finish and are
committed. Nothing is lost, and resume carries on where it stopped.

Temporal CLI equivalent:
  temporal workflow signal --workflow-id ID --name pause`,
		Example: "  spiderpool campaign pause my-crawl",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			st, err := cs.Pause(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(Steered{CampaignID: args[0], Operation: campaign.Pause, Status: &st})
			}
			fmt.Printf("%s: paused (batches in flight finish)\n", args[0])
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) resumeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused campaign",
		Long: `Resume a paused campaign.

Temporal CLI equivalent:
  temporal workflow signal --workflow-id ID --name resume`,
		Example: "  spiderpool campaign resume my-crawl",
		Args:    cobra.ExactArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			st, err := cs.Resume(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(Steered{CampaignID: args[0], Operation: campaign.Resume, Status: &st})
			}
			fmt.Printf("%s: resumed\n", args[0])
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) reweightCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reweight ID NODE WEIGHT",
		Short: "Set a node's weight in a campaign's ring (0 drains it)",
		Long: `Set a node's weight in the campaign's ring, overriding the weight it
registered with. Only hosts moving to or from that node change owner. The
new weight holds for this campaign until set again.

Temporal CLI equivalent:
  temporal workflow signal --workflow-id ID --name reweight --input '{"node":"NODE","weight":WEIGHT}'`,
		Example: "  spiderpool campaign reweight my-crawl node-3 0.5\n  spiderpool campaign reweight my-crawl node-1 2",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := strconv.ParseFloat(args[2], 64)
			if err != nil {
				return usageError(fmt.Errorf("weight %q: not a number", args[2]))
			}
			if err := campaign.ValidWeight("weight", w); err != nil {
				return usageError(err)
			}
			return a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
				ns, err := cs.Reweight(ctx, args[0], args[1], w)
				return printNodeChange(args[0], campaign.Reweight, ns, err, asJSON)
			})(cmd, args)
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) drainCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "drain ID NODE",
		Short: "Send a node no new batches; it finishes those in flight",
		Long: `Drain a node: it gets no new batches and its hosts move to their next
owners; batches in flight finish. Once 'status' shows it drained it can be
stopped without any page being fetched again.

Temporal CLI equivalent:
  temporal workflow signal --workflow-id ID --name drain --input '{"node":"NODE"}'`,
		Example: "  spiderpool campaign drain my-crawl node-2\n  spiderpool campaign status my-crawl   # wait for 'drained'",
		Args:    cobra.ExactArgs(2),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			ns, err := cs.Drain(ctx, args[0], args[1])
			return printNodeChange(args[0], campaign.Drain, ns, err, asJSON)
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) undrainCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "undrain ID NODE",
		Short: "Take a drained node back into the ring",
		Long: `Undrain a node: it takes back its share of hosts at its weight.

Temporal CLI equivalent:
  temporal workflow signal --workflow-id ID --name undrain --input '{"node":"NODE"}'`,
		Example: "  spiderpool campaign undrain my-crawl node-2",
		Args:    cobra.ExactArgs(2),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			ns, err := cs.Undrain(ctx, args[0], args[1])
			return printNodeChange(args[0], campaign.Undrain, ns, err, asJSON)
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

// printNodeChange prints a node update's answer, or passes on its error.
func printNodeChange(id, op string, ns campaign.NodeStatus, err error, asJSON bool) error {
	switch {
	case err != nil:
		return err
	case asJSON:
		return printJSON(Steered{CampaignID: id, Operation: op, Node: &ns})
	}
	fmt.Printf("%s: node %s is %s, weight %s\n", id, ns.ID, ns.State, weightText(ns))
	return nil
}

func (a *app) listCmd() *cobra.Command {
	var (
		status string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--status S]",
		Short: "List campaigns, newest first, with their status and page counts",
		Long: `List campaigns from Temporal's visibility store, newest first, one line each
(a campaign's latest run). --status filters by the CampaignStatus search
attribute: Running, Paused, Completed, Cancelled or Failed.

Temporal CLI equivalent:
  temporal workflow list --query 'WorkflowType="CrawlCampaign" AND CampaignStatus="Completed"'`,
		Example: "  spiderpool campaign list\n  spiderpool campaign list --status Running\n  spiderpool campaign list --json | jq '.[].id'",
		Args:    cobra.NoArgs,
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, _ []string) error {
			list, err := cs.List(ctx, status, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tFETCHED\tFAILED\tSTARTED\tTOOK")
			for _, c := range list {
				took := "-"
				if c.Closed != nil {
					took = c.Closed.Sub(c.Started).Round(100 * time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Status, count(c.Fetched), count(c.Failed),
					c.Started.Local().Format("2006-01-02 15:04:05"), took)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&status, "status", "", "only campaigns with this CampaignStatus")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many campaigns")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func count(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}
