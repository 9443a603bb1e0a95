package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"

	"github.com/spiderpool/spiderpool/control"
)

// The `campaign schedule` commands: recurring campaigns on Temporal
// Schedules (control.Schedules).

// ScheduleChanged is what the schedule commands but create and list print
// with --json: the schedule, what was asked, and the schedule as it is
// after (none after delete).
type ScheduleChanged struct {
	ScheduleID string                `json:"schedule_id"`
	Operation  string                `json:"operation"`
	Schedule   *control.ScheduleInfo `json:"schedule,omitempty"`
	// StillRunning is trigger's: the campaigns of the schedule running as
	// it was asked, which make it skip the run asked for.
	StillRunning []string `json:"still_running,omitempty"`
}

// withSchedules makes a command body that runs with a Temporal
// connection, closed after.
func (a *app) withSchedules(run func(ctx context.Context, ss *control.Schedules, args []string) error) func(*cobra.Command, []string) error {
	return a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
		return run(ctx, &control.Schedules{Client: cs.Client, Queue: cs.Queue, Namespace: a.cfg.Namespace}, args)
	})
}

func (a *app) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Run a campaign again and again, on a Temporal Schedule",
		Long: `A schedule starts a campaign every interval or at the times of a cron
expression. Each run is a campaign of its own, with ID SCHEDULE-TIME (the
time it was due, which Temporal appends), and every run belongs to the
recrawl series named after the schedule (spec.recrawl), so it revisits what
the last one saw. A run falling due while the last is still going is
skipped. Schedules are listed under Schedules in the Temporal Web UI.`,
	}
	cmd.AddCommand(a.scheduleCreateCmd(), a.scheduleListCmd(), a.schedulePauseCmd(),
		a.scheduleUnpauseCmd(), a.scheduleTriggerCmd(), a.scheduleDeleteCmd())
	return cmd
}

func (a *app) scheduleCreateCmd() *cobra.Command {
	var (
		specFile, every, cron string
		seeds                 []string
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "create ID [--spec FILE] [--seed URL]... (--every DURATION | --cron EXPR)",
		Short: "Create a schedule that starts the campaign every interval or at cron times",
		Long: `Create a schedule that starts a campaign from the spec (read as 'campaign
start' reads it) every --every, or at the times of --cron. The spec's
recrawl series is the schedule ID unless it names one (spec.recrawl.series).

--every runs at multiples of the interval since the Unix epoch (every 1h:
on the hour, UTC). --cron takes 5 fields (minute hour day-of-month month
day-of-week), 6 (and year) or 7 (second first, and year), @daily, @hourly
and the like, and a CRON_TZ=Europe/Paris prefix; times are UTC otherwise.

Temporal CLI equivalent:
  temporal schedule create --schedule-id ID --interval 24h --overlap-policy Skip \
    --type CrawlCampaign --task-queue spiderpool.control --workflow-id ID \
    --input '{"seeds":["https://example.org/"],"recrawl":{"series":"ID"}}'`,
		Example: `  spiderpool campaign schedule create nightly-docs --spec docs.json --cron "0 3 * * *"
  spiderpool campaign schedule create hourly-news --seed https://news.example/ --every 1h
  spiderpool campaign schedule trigger nightly-docs   # a first run now`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			spec, err := readSpec(specFile, cmd.InOrStdin())
			if err != nil {
				return usageError(err)
			}
			spec.Seeds = append(spec.Seeds, seeds...)
			when, problems := recurrence(every, cron)
			if _, err := control.InSeries(spec, id).Normalize(); err != nil {
				problems = append(problems, fmt.Errorf("invalid campaign spec%s:\n%w", source(specFile), err))
			}
			if len(problems) > 0 {
				return usageError(errors.Join(problems...))
			}
			return a.withSchedules(func(ctx context.Context, ss *control.Schedules, _ []string) error {
				if err := ss.Create(ctx, id, spec, when); err != nil {
					var refused *serviceerror.InvalidArgument
					if errors.As(err, &refused) { // what only the server judges: a time zone, say
						return usageError(err)
					}
					return err
				}
				info, err := ss.Describe(ctx, id)
				if err != nil { // created all the same: say what is known
					info = when.Info(id)
				}
				if asJSON {
					return printJSON(info)
				}
				fmt.Printf("created schedule %s: %s, next run %s\n", id, when, nextRun(info))
				fmt.Printf("each run is a campaign %s-TIME, in recrawl series %q\n", id, control.InSeries(spec, id).Recrawl.Series)
				fmt.Printf("run one now:  spiderpool campaign schedule trigger %s\n", id)
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&specFile, "spec", "", "campaign spec JSON file, or - for standard input")
	cmd.Flags().StringArrayVar(&seeds, "seed", nil, "seed URL (repeatable)")
	cmd.Flags().StringVar(&every, "every", "", "start a run every DURATION (30m, 6h, 24h)")
	cmd.Flags().StringVar(&cron, "cron", "", `start a run at the times of a cron expression ("0 3 * * *")`)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedule as JSON, as list does")
	return cmd
}

// recurrence reads --every and --cron, naming every problem.
func recurrence(every, cron string) (control.Recurrence, []error) {
	r := control.Recurrence{Cron: cron}
	var problems []error
	if every != "" {
		d, err := time.ParseDuration(every)
		if err != nil {
			problems = append(problems, fmt.Errorf("--every %q: not a duration (like 30m, 6h or 24h)", every))
			d = control.MinEvery // a stand-in, so that the rest is checked still
		}
		r.Every = d
	}
	if err := r.Validate(); err != nil {
		problems = append(problems, err)
	}
	return r, problems
}

func nextRun(info control.ScheduleInfo) string {
	if info.Paused {
		return "none (paused)"
	}
	if len(info.NextRuns) == 0 {
		return "-"
	}
	return info.NextRuns[0].Local().Format("2006-01-02 15:04:05 MST")
}

func (a *app) scheduleListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List campaign schedules: when they run, paused or not, their next and last runs",
		Long: `List the schedules whose action starts a campaign (on any control queue; other
schedules of the namespace are left out), by ID: when each runs, whether it
is paused (and the note saying why), its next run and its last. --json
gives each schedule's next runs and its recent runs (campaign IDs and their
Temporal status).

Temporal CLI equivalent:
  temporal schedule list`,
		Example: "  spiderpool campaign schedule list\n  spiderpool campaign schedule list --json | jq '.[] | {id, paused}'",
		Args:    cobra.NoArgs,
		RunE: a.withSchedules(func(ctx context.Context, ss *control.Schedules, _ []string) error {
			list, err := ss.List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tWHEN\tSTATE\tNEXT RUN\tLAST RUN")
			for _, s := range list {
				state := "active"
				if s.Paused {
					state = "paused"
					if s.Note != "" {
						state += ": " + s.Note
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.When(), state, nextRun(s), lastRun(s))
			}
			return tw.Flush()
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func lastRun(s control.ScheduleInfo) string {
	if len(s.Recent) == 0 {
		return "-"
	}
	r := s.Recent[len(s.Recent)-1]
	if r.Status == "" {
		return r.CampaignID
	}
	return r.CampaignID + " (" + r.Status + ")"
}

func (a *app) schedulePauseCmd() *cobra.Command {
	var (
		note   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "pause ID [--note TEXT]",
		Short: "Stop a schedule starting campaigns; a campaign running goes on",
		Long: `Pause a schedule: it starts no campaign until unpaused. A campaign it
started that is running goes on (pause it with 'campaign pause'). The note
says why, in 'schedule list' and the Web UI.

Temporal CLI equivalent:
  temporal schedule toggle --schedule-id ID --pause --reason TEXT`,
		Example: `  spiderpool campaign schedule pause nightly-docs --note "site migration until Monday"`,
		Args:    cobra.ExactArgs(1),
		RunE: a.withSchedules(func(ctx context.Context, ss *control.Schedules, args []string) error {
			if err := ss.Pause(ctx, args[0], note); err != nil {
				return err
			}
			return printScheduleChange(ctx, ss, args[0], "pause", asJSON, "paused (a campaign running goes on)")
		}),
	}
	cmd.Flags().StringVar(&note, "note", "", "why it is paused, shown by list and the Web UI")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) scheduleUnpauseCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "unpause ID",
		Short: "Let a paused schedule start campaigns again",
		Long: `Unpause a schedule: it starts the next campaign at its next due time. Runs
missed while it was paused are not made up.

Temporal CLI equivalent:
  temporal schedule toggle --schedule-id ID --unpause --reason TEXT`,
		Example: "  spiderpool campaign schedule unpause nightly-docs",
		Args:    cobra.ExactArgs(1),
		RunE: a.withSchedules(func(ctx context.Context, ss *control.Schedules, args []string) error {
			if err := ss.Unpause(ctx, args[0]); err != nil {
				return err
			}
			return printScheduleChange(ctx, ss, args[0], "unpause", asJSON, "unpaused")
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

// printScheduleChange prints a schedule as it is after a change.
func printScheduleChange(ctx context.Context, ss *control.Schedules, id, op string, asJSON bool, done string) error {
	info, err := ss.Describe(ctx, id)
	if asJSON {
		out := ScheduleChanged{ScheduleID: id, Operation: op}
		if err == nil {
			out.Schedule = &info
		}
		return printJSON(out)
	}
	if err != nil {
		fmt.Printf("%s: %s\n", id, done)
		return nil
	}
	fmt.Printf("%s: %s; next run %s\n", id, done, nextRun(info))
	return nil
}

func (a *app) scheduleTriggerCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "trigger ID",
		Short: "Start a run of a schedule now (paused or not)",
		Long: `Start a run of the schedule now, paused or not: a campaign ID-TIME, as a
scheduled run is. Like a scheduled run, it is skipped if a run of the
schedule is still going.

Temporal CLI equivalent:
  temporal schedule trigger --schedule-id ID`,
		Example: "  spiderpool campaign schedule trigger nightly-docs\n  spiderpool campaign schedule list",
		Args:    cobra.ExactArgs(1),
		RunE: a.withSchedules(func(ctx context.Context, ss *control.Schedules, args []string) error {
			id := args[0]
			before, err := ss.Describe(ctx, id)
			if err != nil {
				return err
			}
			if err := ss.Trigger(ctx, id); err != nil {
				return err
			}
			running := before.Running()
			if asJSON {
				return printJSON(ScheduleChanged{ScheduleID: id, Operation: "trigger", StillRunning: running})
			}
			if len(running) > 0 {
				fmt.Printf("%s: run requested, and skipped: campaign %s is still running\n", id, strings.Join(running, ", "))
				return nil
			}
			fmt.Printf("%s: run requested; it starts as campaign %s-TIME (see: spiderpool campaign schedule list)\n", id, id)
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (a *app) scheduleDeleteCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a schedule; campaigns it started are left as they are",
		Long: `Delete a schedule. The campaigns it started are left as they are, a running
one included (cancel it with 'campaign cancel'), and so is what its series
saw, in Postgres: a schedule created again under the same ID carries on.

Temporal CLI equivalent:
  temporal schedule delete --schedule-id ID`,
		Example: "  spiderpool campaign schedule delete nightly-docs",
		Args:    cobra.ExactArgs(1),
		RunE: a.withSchedules(func(ctx context.Context, ss *control.Schedules, args []string) error {
			if err := ss.Delete(ctx, args[0]); err != nil {
				return err
			}
			if asJSON {
				return printJSON(ScheduleChanged{ScheduleID: args[0], Operation: "delete"})
			}
			fmt.Printf("%s: deleted (campaigns it started are left as they are)\n", args[0])
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}
