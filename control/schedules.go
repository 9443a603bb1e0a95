package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	schedulepb "go.temporal.io/api/schedule/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/campaign"
)

// Schedules makes campaigns recur. A schedule is a Temporal Schedule (the
// Web UI lists it under Schedules) whose action starts the campaign
// workflow with a fixed, normalised spec; each run is a campaign of its
// own, its ID the schedule's with the scheduled time appended by Temporal
// ("nightly-2026-12-03T03:00:00Z"). The runs of one schedule belong to one
// recrawl series (spec.recrawl), so each revisits what the last saw.
//
// A schedule skips a run that falls due while the last is still going:
// two runs of one series at once would fetch every page twice.
type Schedules struct {
	Client client.Client
	// Queue is the control task queue the campaigns run on.
	Queue string
	// Namespace is the client's: schedules are read with Temporal's own
	// DescribeSchedule, whose answer says how each recent run ended (the
	// SDK's description drops that).
	Namespace string
}

// Recurrence is when a schedule starts its campaign: every Every, or at
// the times a cron expression names (Temporal's syntax: 5 fields, 6 with a
// year, 7 with seconds first and a year; @daily and the like; a CRON_TZ=
// prefix). Exactly one is set.
type Recurrence struct {
	Every time.Duration
	Cron  string
}

// MinEvery is the shortest interval a schedule takes.
const MinEvery = time.Second

// Validate names every problem of r.
func (r Recurrence) Validate() error {
	switch {
	case r.Every == 0 && r.Cron == "":
		return errors.New("--every or --cron: one is required")
	case r.Every != 0 && r.Cron != "":
		return errors.New("--every and --cron: give one, not both")
	case r.Cron != "":
		return checkCron(r.Cron)
	case r.Every < MinEvery:
		return fmt.Errorf("--every: must be at least %v, got %v", MinEvery, r.Every)
	}
	return nil
}

func (r Recurrence) String() string { return r.text().String() }

func (r Recurrence) spec() client.ScheduleSpec {
	if r.Every > 0 {
		return client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: r.Every}}}
	}
	return client.ScheduleSpec{CronExpressions: []string{r.Cron}}
}

// recurrenceMemo is the key of the schedule memo that keeps the
// recurrence as it was given: Temporal turns a cron expression into
// calendar ranges, which no person would recognise.
const recurrenceMemo = "spiderpool_recurrence"

// recurrenceText is a Recurrence as ScheduleInfo and the memo show it.
type recurrenceText struct {
	Every string `json:"every,omitempty"`
	Cron  string `json:"cron,omitempty"`
}

func (r Recurrence) text() recurrenceText {
	if r.Every > 0 {
		return recurrenceText{Every: ShortDuration(r.Every)}
	}
	return recurrenceText{Cron: r.Cron}
}

// String is the recurrence as one phrase: "every 1h", "cron 0 3 * * *",
// or "calendar" for a schedule made elsewhere with calendar ranges.
func (t recurrenceText) String() string {
	switch {
	case t.Every != "":
		return "every " + t.Every
	case t.Cron != "":
		return "cron " + t.Cron
	}
	return "calendar"
}

// Info is the schedule id as its recurrence alone tells it, before the
// server says more (next runs, recent runs).
func (r Recurrence) Info(id string) ScheduleInfo {
	t := r.text()
	return ScheduleInfo{ID: id, Every: t.Every, Cron: t.Cron, NextRuns: []time.Time{}, Recent: []ScheduledRun{}}
}

// ShortDuration writes d without its empty trailing units: "1h", not
// "1h0m0s".
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// InSeries makes spec a run of the series id, the schedule's ID, unless
// it names its own series. The caller's spec is left alone.
func InSeries(spec campaign.Spec, id string) campaign.Spec {
	r := campaign.Recrawl{}
	if spec.Recrawl != nil {
		r = *spec.Recrawl
	}
	if r.Series == "" {
		r.Series = id
	}
	spec.Recrawl = &r
	return spec
}

// ScheduleInfo is a schedule as `campaign schedule list` shows it.
type ScheduleInfo struct {
	ID string `json:"id"`
	// Every or Cron is when it runs, as given (Cron is "" and Every empty
	// for a schedule made elsewhere with calendar ranges).
	Every  string `json:"every,omitempty"`
	Cron   string `json:"cron,omitempty"`
	Paused bool   `json:"paused"`
	Note   string `json:"note,omitempty"`
	// Queue is the task queue its campaigns run on.
	Queue    string         `json:"queue"`
	NextRuns []time.Time    `json:"next_runs"`
	Recent   []ScheduledRun `json:"recent_runs"`
	Created  time.Time      `json:"created"`
}

// When is the recurrence as one phrase: "every 1h", "cron 0 3 * * *".
func (s ScheduleInfo) When() string { return recurrenceText{Every: s.Every, Cron: s.Cron}.String() }

// Running lists the campaigns of the schedule that are running: a run
// falling due, or triggered, now is skipped.
func (s ScheduleInfo) Running() []string {
	var ids []string
	for _, r := range s.Recent {
		if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING.String() {
			ids = append(ids, r.CampaignID)
		}
	}
	return ids
}

// ScheduledRun is one campaign a schedule started, oldest first.
type ScheduledRun struct {
	CampaignID  string    `json:"campaign_id"`
	RunID       string    `json:"run_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	StartedAt   time.Time `json:"started_at"`
	// Status is Temporal's: Running, Completed, Failed, ...; empty when the
	// server does not say.
	Status string `json:"status,omitempty"`
}

// ScheduleNotFoundError is a schedule ID with no schedule.
type ScheduleNotFoundError struct{ Schedule string }

func (e *ScheduleNotFoundError) Error() string {
	return fmt.Sprintf("no schedule with ID %q", e.Schedule)
}
func (e *ScheduleNotFoundError) Is(err error) bool { return err == ErrNotFound }

// ErrScheduleExists is matched (errors.Is) by Create's error for an ID
// that a schedule has already.
var ErrScheduleExists = errors.New("schedule exists already")

// Create validates spec and when, and creates the schedule id that starts
// the campaign. As Start does, it refuses an invalid spec with every
// problem named, and passes the normalised spec, so that the Web UI shows
// what each run crawls with. spec is made a run of the series id first
// (InSeries).
func (s *Schedules) Create(ctx context.Context, id string, spec campaign.Spec, when Recurrence) error {
	spec, err := InSeries(spec, id).Normalize()
	if err != nil {
		return fmt.Errorf("invalid campaign spec:\n%w", err)
	}
	if err := when.Validate(); err != nil {
		return err
	}
	_, err = s.Client.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:   id,
		Spec: when.spec(),
		Action: &client.ScheduleWorkflowAction{
			ID:            id,
			Workflow:      campaign.WorkflowType,
			Args:          []any{spec},
			TaskQueue:     s.Queue,
			StaticSummary: fmt.Sprintf("crawl of %d seed(s), from %s, run %s by schedule %s", len(spec.Seeds), firstSeed(spec), when, id),
		},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Memo:    map[string]any{recurrenceMemo: when.text()},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("schedule %s: %w (delete it first, or choose another ID)", id, ErrScheduleExists)
	}
	if err != nil {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	return nil
}

// List describes every schedule whose action starts a campaign (on any
// control queue), by ID. Other schedules of the namespace are left out.
func (s *Schedules) List(ctx context.Context) ([]ScheduleInfo, error) {
	it, err := s.Client.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var ids []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		if e.WorkflowType.Name == campaign.WorkflowType {
			ids = append(ids, e.ID)
		}
	}
	slices.Sort(ids)
	out := []ScheduleInfo{}
	for _, id := range ids {
		info, err := s.Describe(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since it was listed: the list lags
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Describe reads one schedule as it is now (List reads a store that lags).
func (s *Schedules) Describe(ctx context.Context, id string) (ScheduleInfo, error) {
	resp, err := s.Client.WorkflowService().DescribeSchedule(ctx, &workflowservice.DescribeScheduleRequest{
		Namespace: s.Namespace, ScheduleId: id,
	})
	if err != nil {
		return ScheduleInfo{}, fmt.Errorf("describe schedule %s: %w", id, scheduleNotFound(id, err))
	}
	sch, info := resp.GetSchedule(), resp.GetInfo()
	out := ScheduleInfo{
		ID:       id,
		Paused:   sch.GetState().GetPaused(),
		Note:     sch.GetState().GetNotes(),
		Queue:    sch.GetAction().GetStartWorkflow().GetTaskQueue().GetName(),
		NextRuns: []time.Time{},
		Recent:   []ScheduledRun{},
		Created:  info.GetCreateTime().AsTime(),
	}
	when, ok := decode[recurrenceText](resp.GetMemo().GetFields()[recurrenceMemo])
	if !ok {
		when = specText(sch.GetSpec())
	}
	out.Every, out.Cron = when.Every, when.Cron
	for _, t := range info.GetFutureActionTimes() {
		out.NextRuns = append(out.NextRuns, t.AsTime())
	}
	running := map[string]bool{}
	for _, w := range info.GetRunningWorkflows() {
		running[w.GetRunId()] = true
	}
	for _, a := range info.GetRecentActions() {
		run := ScheduledRun{
			CampaignID:  a.GetStartWorkflowResult().GetWorkflowId(),
			RunID:       a.GetStartWorkflowResult().GetRunId(),
			ScheduledAt: a.GetScheduleTime().AsTime(),
			StartedAt:   a.GetActualTime().AsTime(),
		}
		switch st := a.GetStartWorkflowStatus(); {
		case st != enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED:
			run.Status = st.String() // "Running", "Completed", ...
		case running[run.RunID]:
			run.Status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING.String()
		}
		out.Recent = append(out.Recent, run)
	}
	return out, nil
}

// specText describes a schedule made elsewhere from its spec: its first
// interval or cron string, if it has one.
func specText(spec *schedulepb.ScheduleSpec) recurrenceText {
	if iv := spec.GetInterval(); len(iv) > 0 {
		return recurrenceText{Every: ShortDuration(iv[0].GetInterval().AsDuration())}
	}
	if cron := spec.GetCronString(); len(cron) > 0 {
		return recurrenceText{Cron: cron[0]}
	}
	return recurrenceText{}
}

// Pause stops the schedule starting campaigns; a run going on goes on.
// The note says why, in the Web UI and in List.
func (s *Schedules) Pause(ctx context.Context, id, note string) error {
	if note == "" {
		note = "paused with spiderpool campaign schedule pause"
	}
	err := s.Client.ScheduleClient().GetHandle(ctx, id).Pause(ctx, client.SchedulePauseOptions{Note: note})
	return scheduleErr("pause", id, err)
}

// Unpause undoes Pause: the next run is the next due time from now on.
func (s *Schedules) Unpause(ctx context.Context, id string) error {
	err := s.Client.ScheduleClient().GetHandle(ctx, id).Unpause(ctx, client.ScheduleUnpauseOptions{
		Note: "unpaused with spiderpool campaign schedule unpause",
	})
	return scheduleErr("unpause", id, err)
}

// Trigger starts a run now, paused or not. Under the schedule's overlap
// policy a run still going makes it skip this one: the caller can tell
// from Describe's recent runs, or warn beforehand.
//
// Temporal names a run after the second it was due: a run triggered in
// the second of the last one would take its campaign ID, and carry on
// that campaign instead of starting afresh. Trigger waits for the next
// second first (a second at most).
func (s *Schedules) Trigger(ctx context.Context, id string) error {
	info, err := s.Describe(ctx, id)
	if err != nil {
		return err
	}
	if n := len(info.Recent); n > 0 {
		last := info.Recent[n-1].ScheduledAt.Truncate(time.Second)
		if wait := time.Until(last.Add(time.Second)); wait > 0 {
			t := time.NewTimer(min(wait, time.Second))
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	err = s.Client.ScheduleClient().GetHandle(ctx, id).Trigger(ctx, client.ScheduleTriggerOptions{})
	return scheduleErr("trigger", id, err)
}

// Delete removes the schedule. Campaigns it started are left as they are,
// running or not, and so is their series in Postgres.
func (s *Schedules) Delete(ctx context.Context, id string) error {
	err := s.Client.ScheduleClient().GetHandle(ctx, id).Delete(ctx)
	return scheduleErr("delete", id, err)
}

func scheduleErr(op, id string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s schedule %s: %w", op, id, scheduleNotFound(id, err))
}

func scheduleNotFound(id string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &ScheduleNotFoundError{Schedule: id}
	}
	return err
}

// The fields of a cron expression, in the order of the 7-field form, with
// the values Temporal takes in each.
var cronFields = []struct {
	name     string
	min, max int
	names    []string // month or weekday names, matched by prefix
	minName  int      // shortest prefix taken
}{
	{name: "second", max: 59},
	{name: "minute", max: 59},
	{name: "hour", max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, minName: 3, names: []string{
		"january", "february", "march", "april", "may", "june", "july",
		"august", "september", "october", "november", "december"}},
	{name: "day of week", max: 7, minName: 2, names: []string{
		"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}},
	{name: "year", min: 2000, max: 2100},
}

// cronMacros are the named expressions Temporal takes besides
// "@every DURATION[/OFFSET]".
var cronMacros = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

// checkCron checks a cron expression as Temporal will read it, so that a
// mistake is a usage error naming the field, before anything is sent. The
// server checks again (a time zone, say, only it can judge).
func checkCron(expr string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("--cron %q: %s", expr, fmt.Sprintf(format, args...))
	}
	c := strings.TrimSpace(expr)
	if strings.HasPrefix(c, "TZ=") || strings.HasPrefix(c, "CRON_TZ=") {
		_, rest, ok := strings.Cut(c, " ")
		if !ok {
			return bad("a time zone and nothing after it")
		}
		c = strings.TrimSpace(rest)
	}
	if every, ok := strings.CutPrefix(c, "@every"); ok {
		iv, phase, hasPhase := strings.Cut(strings.TrimSpace(every), "/")
		if _, err := time.ParseDuration(iv); err != nil {
			return bad("@every wants a duration like 6h, got %q", iv)
		}
		if _, err := time.ParseDuration(phase); hasPhase && err != nil {
			return bad("@every's offset (after /) wants a duration like 30m, got %q", phase)
		}
		return nil
	}
	if strings.HasPrefix(c, "@") {
		if !slices.Contains(cronMacros, c) {
			return bad("unknown %s (known: %s, @every DURATION)", c, strings.Join(cronMacros, ", "))
		}
		return nil
	}
	fields := strings.Fields(c)
	var order []int // indexes into cronFields
	switch len(fields) {
	case 5:
		order = []int{1, 2, 3, 4, 5}
	case 6:
		order = []int{1, 2, 3, 4, 5, 6}
	case 7:
		order = []int{0, 1, 2, 3, 4, 5, 6}
	default:
		return bad("want 5 fields (minute hour day-of-month month day-of-week), 6 (and year) or 7 (second first), got %d", len(fields))
	}
	var errs []error
	for i, f := range fields {
		spec := cronFields[order[i]]
		if err := checkCronField(f, spec.min, spec.max, spec.names, spec.minName); err != nil {
			errs = append(errs, bad("%s %q: %v", spec.name, f, err))
		}
	}
	return errors.Join(errs...)
}

// checkCronField checks one field: a comma-separated list of *, N or N-M,
// each with an optional /STEP.
func checkCronField(f string, lo, hi int, names []string, minName int) error {
	for _, part := range strings.Split(f, ",") {
		rng, step, hasStep := strings.Cut(part, "/")
		if hasStep {
			if n, err := strconv.Atoi(step); err != nil || n < 1 {
				return fmt.Errorf("step %q: want a whole number >= 1", step)
			}
		}
		if rng == "*" {
			continue
		}
		from, to, isRange := strings.Cut(rng, "-")
		start, err := cronValue(from, lo, hi, names, minName)
		if err != nil {
			return err
		}
		if !isRange {
			continue
		}
		end, err := cronValue(to, lo, hi, names, minName)
		if err != nil {
			return err
		}
		if end < start {
			return fmt.Errorf("range %s ends before it starts", rng)
		}
	}
	return nil
}

func cronValue(s string, lo, hi int, names []string, minName int) (int, error) {
	if len(s) >= minName && len(names) > 0 {
		for i, name := range names {
			if strings.HasPrefix(name, strings.ToLower(s)) {
				return i + lo, nil
			}
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if len(names) > 0 {
			return 0, fmt.Errorf("%q is neither a number nor a name (%s..%s)", s, names[0][:minName], names[len(names)-1][:minName])
		}
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
	}
	return n, nil
}
