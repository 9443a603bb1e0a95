package devstack_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
)

func TestStopEndsAProcessAndKeepsItsLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "p.log")
	p, err := devstack.StartProcess(exec.Command("sh", "-c", "echo started; exec sleep 60"), devstack.ProcessOptions{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.Log(), "started"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log %q after 10s", p.Log())
		}
	}
	if p.Err() != nil {
		t.Fatalf("Err of a running process: %v", p.Err())
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if p.Err() == nil || !strings.Contains(p.Err().Error(), "terminated") {
		t.Errorf("Err after SIGTERM: %v", p.Err())
	}
	if p.Log() != "started\n" {
		t.Errorf("log %q", p.Log())
	}
}

func TestKillOfAnExitedProcessDoesNothing(t *testing.T) {
	p, err := devstack.StartProcess(exec.Command("true"), devstack.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if err := p.Kill(); err != nil {
		t.Errorf("Kill after exit: %v", err)
	}
	if p.Err() != nil {
		t.Errorf("Err of a clean exit: %v", p.Err())
	}
	if p.Log() != "" {
		t.Errorf("Log without a log file: %q", p.Log())
	}
}

func TestEnvironAddsTheSetFieldsThenExtra(t *testing.T) {
	t.Setenv(config.EnvNodeSecret, "inherited")
	env := devstack.Env{DatabaseURL: "postgres://a", ControlQueue: "q", Extra: []string{config.EnvDatabaseURL + "=postgres://b"}}.Environ()
	if got, want := len(env), len(os.Environ())+3; got != want {
		t.Errorf("%d variables, want %d (the inherited, two fields, one extra)", got, want)
	}
	last := func(name string) string {
		for _, kv := range slices.Backward(env) { // exec uses the last
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v
			}
		}
		return ""
	}
	for name, want := range map[string]string{
		config.EnvDatabaseURL:  "postgres://b", // Extra wins
		config.EnvControlQueue: "q",
		config.EnvNodeSecret:   "inherited", // an empty field leaves it alone
	} {
		if got := last(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestStartNodeNamesTheNodeAndItsIdentities(t *testing.T) {
	_, err := devstack.StartNode(devstack.NodeOptions{Binary: filepath.Join(t.TempDir(), "missing"), ID: "n1", Weight: 1})
	if err == nil || !strings.Contains(err.Error(), "node n1") {
		t.Errorf("start of a missing binary: %v, want an error naming node n1", err)
	}
	n, err := devstack.StartNode(devstack.NodeOptions{Binary: "true", ID: "big", Weight: 2, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	<-n.Exited()
	if want := []string{"big-1", "big-2", "big-3"}; !slices.Equal(n.Identities, want) {
		t.Errorf("identities %v, want %v", n.Identities, want)
	}
}

func TestPeakRSSOfThisProcess(t *testing.T) {
	rss, err := devstack.PeakRSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("PeakRSS = %d, %v", rss, err)
	}
}
