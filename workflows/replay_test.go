package workflows

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplayRecordedHistories replays histories recorded from real runs
// against the dev server (see testdata/README.md). A change to the
// workflow's decisions that is not deterministic fails here. The SDK's own
// check compares activity types and order only; this test also compares
// each scheduled activity's task queue and input with the history, so a
// change in routing (which node gets which URLs) fails too.
func TestReplayRecordedHistories(t *testing.T) {
	// One folder per release: every released version's histories are
	// replayed, so a change that breaks runs already in flight fails here.
	files, err := filepath.Glob("testdata/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	logger := tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "testdata/"), ".json")
		t.Run(name, func(t *testing.T) {
			rec := &scheduleRecorder{}
			r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
				Interceptors: []interceptor.WorkerInterceptor{rec},
			})
			if err != nil {
				t.Fatal(err)
			}
			Register(r)
			id, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".id")
			if err != nil {
				t.Fatalf("workflow ID of %s: %v", f, err)
			}
			history := readHistory(t, f)
			// The run's own ID, as the workflow saw it: processor leases
			// and children are named after it.
			runID := history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
			if runID == "" {
				runID = "replay"
			}
			if err := r.ReplayWorkflowHistoryWithOptions(logger, history, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: strings.TrimSpace(string(id)), RunID: runID},
			}); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
			want := scheduledIn(history)
			if len(rec.got) != len(want) {
				t.Fatalf("replay scheduled %d activities, history has %d", len(rec.got), len(want))
			}
			for i := range want {
				if rec.got[i] != want[i] {
					t.Fatalf("activity %d differs from the history:\n  replay:  %+v\n  history: %+v", i, rec.got[i], want[i])
				}
			}
		})
	}
}

type scheduled struct {
	Type, Queue, Input string
}

// scheduleRecorder notes every activity the workflow schedules on replay.
type scheduleRecorder struct {
	interceptor.WorkerInterceptorBase
	mu  sync.Mutex
	got []scheduled
}

func (r *scheduleRecorder) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &recordInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, r: r}
}

type recordInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	r *scheduleRecorder
}

func (i *recordInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&recordOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, r: i.r})
}

type recordOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	r *scheduleRecorder
}

func (o *recordOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(args...)
	input := ""
	if err == nil {
		var parts []string
		for _, p := range payloads.GetPayloads() {
			parts = append(parts, canonicalJSON(p.GetData()))
		}
		input = strings.Join(parts, "|")
	}
	o.r.mu.Lock()
	o.r.got = append(o.r.got, scheduled{Type: activityType, Queue: workflow.GetActivityOptions(ctx).TaskQueue, Input: input})
	o.r.mu.Unlock()
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func readHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func scheduledIn(h *historypb.History) []scheduled {
	var out []scheduled
	for _, e := range h.GetEvents() {
		if e.GetEventType() != enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED {
			continue
		}
		a := e.GetActivityTaskScheduledEventAttributes()
		var parts []string
		for _, p := range a.GetInput().GetPayloads() {
			parts = append(parts, canonicalJSON(p.GetData()))
		}
		out = append(out, scheduled{Type: a.GetActivityType().GetName(), Queue: a.GetTaskQueue().GetName(), Input: strings.Join(parts, "|")})
	}
	return out
}

// canonicalJSON re-encodes a JSON payload so key order and spacing do not
// matter.
func canonicalJSON(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	_ = enc.Encode(v)
	return strings.TrimSpace(buf.String())
}
