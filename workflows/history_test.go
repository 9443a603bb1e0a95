package workflows

import (
	"sync"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// historyMeter estimates the history a run would write on a Temporal
// server, from the commands it issues in the SDK test environment (which
// keeps no history): every command is charged the events the server
// records for it, and every wake-up of the workflow a whole workflow task.
// The figure is an upper bound: the server often handles several wake-ups
// in one task, which the meter charges separately.
//
// Charges: a workflow start 4 (started; task scheduled, started,
// completed) plus 1 to close; an activity 7 (scheduled, cancel requested,
// started, closed; the task its result wakes); a timer 5 (started, fired;
// its task); a local activity call 1 (its marker); a side effect, version
// marker (the first call per change) or search attribute upsert 1; a signal 4 and an update 5 (the
// event or two, and their task). A local activity retried by the SDK after
// a backoff longer than the workflow task timeout costs a marker, a timer
// and a task (6); a shorter backoff is spent inside the workflow task, which
// the SDK keeps alive with a new task (3 events) every 80% of the timeout.
type historyMeter struct {
	interceptor.WorkerInterceptorBase
	env *testsuite.TestWorkflowEnvironment
	// drive feeds the estimate to GetInfo().GetCurrentHistoryLength, so a
	// run continues as new as it would on a server.
	drive bool

	mu        sync.Mutex
	events    int
	inProcess time.Duration // local activity backoff spent in workflow tasks
	versions  map[string]bool
	log       []charge
}

type charge struct {
	at     time.Time
	what   string
	events int
}

// serverTaskTimeout is the workflow task timeout of runs on a server (the
// default); the test environment's is shorter.
const serverTaskTimeout = 10 * time.Second

// laBackoffSummary is the summary the SDK gives the timer it starts
// between two attempts of a local activity.
const laBackoffSummary = "LocalActivity Backoff"

func newHistoryMeter(env *testsuite.TestWorkflowEnvironment, drive bool) *historyMeter {
	m := &historyMeter{env: env, drive: drive}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{m}})
	return m
}

func (m *historyMeter) add(what string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events += n
	m.log = append(m.log, charge{at: m.env.Now(), what: what, events: n})
	if m.drive {
		m.env.SetCurrentHistoryLength(m.events)
	}
}

// between sums the events charged in [from, to), in all and by what
// they were charged for.
func (m *historyMeter) between(from, to time.Time) (int, map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, by := 0, map[string]int{}
	for _, c := range m.log {
		if !c.at.Before(from) && c.at.Before(to) {
			n += c.events
			by[c.what] += c.events
		}
	}
	return n, by
}

func (m *historyMeter) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events
}

func (m *historyMeter) timer(d time.Duration, opts workflow.TimerOptions) {
	if opts.Summary != laBackoffSummary {
		m.add("timer", 5)
		return
	}
	if d > serverTaskTimeout {
		m.add("local activity retry", 6)
		return
	}
	m.mu.Lock()
	heartbeat := serverTaskTimeout * 8 / 10
	before := m.inProcess / heartbeat
	m.inProcess += d
	tasks := int(m.inProcess/heartbeat - before)
	m.mu.Unlock()
	m.add("workflow task heartbeat", 3*tasks)
}

func (m *historyMeter) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &meterInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, m: m}
}

type meterInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	m *historyMeter
}

func (i *meterInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&meterOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, m: i.m})
}

func (i *meterInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	i.m.add("start", 4)
	defer i.m.add("close", 1)
	return i.Next.ExecuteWorkflow(ctx, in)
}

func (i *meterInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	i.m.add("signal", 4)
	return i.Next.HandleSignal(ctx, in)
}

func (i *meterInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	i.m.add("update", 5)
	return i.Next.ExecuteUpdate(ctx, in)
}

type meterOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	m *historyMeter
}

func (o *meterOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.m.add("activity "+activityType, 7)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *meterOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.m.add("local activity "+activityType, 1)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *meterOutbound) NewTimer(ctx workflow.Context, d time.Duration) workflow.Future {
	o.m.timer(d, workflow.TimerOptions{})
	return o.Next.NewTimer(ctx, d)
}

func (o *meterOutbound) NewTimerWithOptions(ctx workflow.Context, d time.Duration, opts workflow.TimerOptions) workflow.Future {
	o.m.timer(d, opts)
	return o.Next.NewTimerWithOptions(ctx, d, opts)
}

func (o *meterOutbound) SideEffect(ctx workflow.Context, f func(workflow.Context) any) converter.EncodedValue {
	o.m.add("side effect", 1)
	return o.Next.SideEffect(ctx, f)
}

func (o *meterOutbound) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	o.m.mu.Lock()
	first := !o.m.versions[changeID]
	if o.m.versions == nil {
		o.m.versions = map[string]bool{}
	}
	o.m.versions[changeID] = true
	o.m.mu.Unlock()
	if first { // later calls read the marker the first wrote
		o.m.add("version marker", 1)
	}
	return o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
}

func (o *meterOutbound) UpsertTypedSearchAttributes(ctx workflow.Context, attrs ...temporal.SearchAttributeUpdate) error {
	o.m.add("search attributes", 1)
	return o.Next.UpsertTypedSearchAttributes(ctx, attrs...)
}
