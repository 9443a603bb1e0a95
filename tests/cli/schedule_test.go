package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestScheduleUsageErrorsExit2: a schedule without an interval, with two,
// with a bad one or with a bad spec is exit 2 with every problem named,
// before any server is dialled (the addresses given answer nothing).
func TestScheduleUsageErrorsExit2(t *testing.T) {
	nowhere := closedAddr(t)
	off := []string{"--temporal-address", nowhere, "--connect-timeout", "1s"}
	create := []string{"campaign", "schedule", "create", "sched", "--seed", "http://127.0.0.1:1/"}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		wants []string
	}{
		{"no interval", "", create, []string{"--every or --cron: one is required"}},
		{"both", "", append(create, "--every", "1h", "--cron", "@daily"), []string{"--every and --cron: give one, not both"}},
		{"bad duration", "", append(create, "--every", "daily"), []string{`--every "daily": not a duration`}},
		{"interval too short", "", append(create, "--every", "1ms"), []string{"--every: must be at least 1s, got 1ms"}},
		{"bad cron", "", append(create, "--cron", "61 3 * * mon-fry"), []string{
			`--cron "61 3 * * mon-fry": minute "61": 61 is out of range 0-59`, `day of week "mon-fry"`}},
		{"cron with a field missing", "", append(create, "--cron", "0 3 * *"), []string{"want 5 fields", "got 4"}},
		{"every problem at once", `{"limits":{"max_pages":-5},"recrawl":{"series":"a b"}}`,
			[]string{"campaign", "schedule", "create", "sched", "--spec", "-", "--every", "soon"},
			[]string{`--every "soon": not a duration`, "invalid campaign spec from standard input",
				"spec.limits.max_pages: must be >= 0, got -5", `spec.recrawl.series: want 1-200 letters`, "spec.seeds"}},
		{"schedule ID not a series name", "", []string{"campaign", "schedule", "create", "my schedule", "--seed", "http://127.0.0.1:1/", "--every", "1h"},
			[]string{`spec.recrawl.series: want 1-200 letters, digits, '.', '_' or '-', got "my schedule"`}},
		{"unknown subcommand", "", []string{"campaign", "schedule", "stop", "x"}, []string{`unknown command "stop" for "spiderpool campaign schedule"`}},
		{"missing ID", "", []string{"campaign", "schedule", "pause"}, []string{"accepts 1 arg(s), received 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spiderpool(t, tc.stdin, append(tc.args, off...)...)
			expect(t, r, exitUsage, tc.wants...)
			if strings.Contains(r.Stderr, "cannot reach") {
				t.Errorf("stderr %q: a usage error is reported as something else", r.Stderr)
			}
		})
	}
}

// TestScheduleLifecycle drives a schedule through the CLI against the
// Temporal dev server: create, list, trigger (a campaign whose ID is the
// schedule's and whose spec is in the schedule's series), pause, unpause,
// delete; an ID taken (exit 1) and an unknown one (exit 5). No node runs:
// the triggered campaign is only started, and terminated at the end.
func TestScheduleLifecycle(t *testing.T) {
	hs := harness.NewStack(t)
	s := &stack{Stack: hs, flags: []string{"--temporal-address", hs.Config.TemporalAddress,
		"--database-url", hs.Config.DatabaseURL, "--control-queue", hs.Config.ControlQueue}}
	id := "cli-sched-" + s.Name
	spec := `{"seeds":["http://127.0.0.1:1/"],"limits":{"max_pages":5}}`

	r := s.cli(t, spec, "campaign", "schedule", "create", id, "--spec", "-", "--every", "1h", "--json")
	expect(t, r, exitOK)
	t.Cleanup(func() { _ = s.Client.ScheduleClient().GetHandle(bg, id).Delete(bg) })
	var created control.ScheduleInfo
	if err := json.Unmarshal([]byte(r.Stdout), &created); err != nil || created.ID != id || created.Every != "1h" ||
		created.Paused || len(created.NextRuns) == 0 || created.Queue != s.Config.ControlQueue {
		t.Fatalf("create --json printed %q (%v)", r.Stdout, err)
	}

	t.Run("the schedule Temporal holds", func(t *testing.T) {
		desc, err := s.Client.ScheduleClient().GetHandle(bg, id).Describe(bg)
		if err != nil {
			t.Fatal(err)
		}
		action, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
		if !ok || action.ID != id || action.Workflow != campaign.WorkflowType || action.TaskQueue != s.Config.ControlQueue {
			t.Errorf("action %+v: want %s on %s with workflow ID %s", desc.Schedule.Action, campaign.WorkflowType, s.Config.ControlQueue, id)
		}
		if p := desc.Schedule.Policy; p == nil || p.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP {
			t.Errorf("policy %+v: want overlap Skip", p)
		}
		if sp := desc.Schedule.Spec; sp == nil || len(sp.Intervals) != 1 || sp.Intervals[0].Every != time.Hour {
			t.Errorf("spec %+v: want every 1h", sp)
		}
	})

	t.Run("an ID taken exits 1", func(t *testing.T) {
		r := s.cli(t, spec, "campaign", "schedule", "create", id, "--spec", "-", "--cron", "@daily")
		expect(t, r, 1, "schedule "+id+": schedule exists already")
	})

	// The list is read from Temporal's visibility store, which lags.
	var listed control.ScheduleInfo
	harness.Eventually(t, 30*time.Second, "the schedule listed", func() bool {
		var ok bool
		listed, ok = findSchedule(t, s, id)
		return ok
	})
	if listed.Every != "1h" || listed.Paused || len(listed.NextRuns) == 0 || len(listed.Recent) != 0 {
		t.Errorf("list shows %+v: want every 1h, active, a next run and no run yet", listed)
	}

	// The triggered campaign runs (no node takes it) until the test ends.
	var campaignID string
	t.Cleanup(func() {
		if campaignID != "" {
			_ = s.Client.TerminateWorkflow(bg, campaignID, "", "test over")
		}
	})
	t.Run("trigger starts a campaign in the series", func(t *testing.T) {
		r := s.cli(t, "", "campaign", "schedule", "trigger", id, "--json")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, `"operation":"trigger"`) || strings.Contains(r.Stdout, "still_running") {
			t.Errorf("trigger --json printed %q", r.Stdout)
		}
		h := s.Client.ScheduleClient().GetHandle(bg, id)
		harness.Eventually(t, 30*time.Second, "the triggered run in the schedule's recent actions", func() bool {
			desc, err := h.Describe(bg)
			if err != nil || len(desc.Info.RecentActions) == 0 {
				return false
			}
			campaignID = desc.Info.RecentActions[0].StartWorkflowResult.WorkflowID
			return true
		})
		if !strings.HasPrefix(campaignID, id+"-") {
			t.Errorf("triggered campaign %q: want ID %s-TIME", campaignID, id)
		}
		input := workflowInput(t, s.Client, campaignID)
		var got struct {
			Seeds   []string
			Recrawl struct{ Series string }
			Limits  map[string]any
		}
		if err := json.Unmarshal(input, &got); err != nil {
			t.Fatalf("input %s: %v", input, err)
		}
		if got.Recrawl.Series != id || len(got.Seeds) != 1 || got.Limits["max_pages"] != float64(5) ||
			got.Limits["max_redirects"] != float64(campaign.DefaultMaxRedirects) {
			t.Errorf("triggered campaign's input %s: want the normalised spec in series %s", input, id)
		}

		info, _ := findSchedule(t, s, id)
		if len(info.Recent) != 1 || info.Recent[0].CampaignID != campaignID || info.Recent[0].Status != "Running" {
			t.Errorf("list shows recent runs %+v: want %s Running", info.Recent, campaignID)
		}
		// A second trigger while the first run goes on is skipped, and
		// says so.
		r = s.cli(t, "", "campaign", "schedule", "trigger", id)
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, "skipped: campaign "+campaignID+" is still running") {
			t.Errorf("trigger during a run printed %q", r.Stdout)
		}
	})

	t.Run("pause and unpause", func(t *testing.T) {
		r := s.cli(t, "", "campaign", "schedule", "pause", id, "--note", "site migration", "--json")
		expect(t, r, exitOK)
		var out struct {
			ScheduleID string                `json:"schedule_id"`
			Operation  string                `json:"operation"`
			Schedule   *control.ScheduleInfo `json:"schedule"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.ScheduleID != id || out.Operation != "pause" ||
			out.Schedule == nil || !out.Schedule.Paused || out.Schedule.Note != "site migration" {
			t.Errorf("pause --json printed %q (%v)", r.Stdout, err)
		}
		if info, _ := findSchedule(t, s, id); !info.Paused || info.Note != "site migration" {
			t.Errorf("after pause list shows %+v: want paused, with the note", info)
		}
		r = s.cli(t, "", "campaign", "schedule", "list")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, "paused: site migration") {
			t.Errorf("list printed %q: want the schedule paused, with its note", r.Stdout)
		}
		expect(t, s.cli(t, "", "campaign", "schedule", "unpause", id), exitOK)
		if info, _ := findSchedule(t, s, id); info.Paused {
			t.Errorf("after unpause list shows %+v: want it active", info)
		}
	})

	t.Run("cron", func(t *testing.T) {
		cid := id + "-cron"
		r := s.cli(t, spec, "campaign", "schedule", "create", cid, "--spec", "-", "--cron", "0 3 * * mon-fri")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, "created schedule "+cid+": cron 0 3 * * mon-fri, next run") {
			t.Errorf("create printed %q", r.Stdout)
		}
		info := describeSchedule(t, s, cid)
		if info.Cron != "0 3 * * mon-fri" || len(info.NextRuns) == 0 || info.NextRuns[0].UTC().Hour() != 3 {
			t.Errorf("cron schedule: %+v", info)
		}
		expect(t, s.cli(t, "", "campaign", "schedule", "delete", cid), exitOK)
	})

	t.Run("not found exits 5", func(t *testing.T) {
		for _, op := range []string{"pause", "unpause", "trigger", "delete"} {
			expect(t, s.cli(t, "", "campaign", "schedule", op, "no-such-schedule"), exitNotFound, `no schedule with ID "no-such-schedule"`)
		}
	})

	t.Run("delete", func(t *testing.T) {
		r := s.cli(t, "", "campaign", "schedule", "delete", id, "--json")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, `"operation":"delete"`) {
			t.Errorf("delete --json printed %q", r.Stdout)
		}
		if _, ok := findSchedule(t, s, id); ok {
			t.Errorf("list shows %s after delete", id)
		}
		expect(t, s.cli(t, "", "campaign", "schedule", "delete", id), exitNotFound, `no schedule with ID "`+id+`"`)
		if campaignID == "" {
			return // trigger failed, and said so
		}
		// The campaign it started is left as it was.
		desc, err := s.Client.DescribeWorkflowExecution(bg, campaignID, "")
		if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Errorf("campaign %s after its schedule was deleted: %v, %v; want it running still", campaignID,
				desc.GetWorkflowExecutionInfo().GetStatus(), err)
		}
	})
}

// findSchedule runs `campaign schedule list --json` and returns the
// schedule id from it, if listed.
func findSchedule(t *testing.T, s *stack, id string) (control.ScheduleInfo, bool) {
	t.Helper()
	r := s.cli(t, "", "campaign", "schedule", "list", "--json")
	expect(t, r, exitOK)
	var list []control.ScheduleInfo
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("list --json printed %q: %v", r.Stdout, err)
	}
	i := slices.IndexFunc(list, func(s control.ScheduleInfo) bool { return s.ID == id })
	if i < 0 {
		return control.ScheduleInfo{}, false
	}
	return list[i], true
}

// describeSchedule waits for the schedule to be listed and returns it.
func describeSchedule(t *testing.T, s *stack, id string) control.ScheduleInfo {
	t.Helper()
	var info control.ScheduleInfo
	harness.Eventually(t, 30*time.Second, "schedule "+id+" listed", func() bool {
		var ok bool
		info, ok = findSchedule(t, s, id)
		return ok
	})
	return info
}
