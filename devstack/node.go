package devstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/store"
)

// Env is where a spiderpool process finds its stack and the node secret,
// passed in its environment (the config.Env* variables). Empty fields are
// left out: the process inherits this one's.
type Env struct {
	DatabaseURL, TemporalAddress, Namespace, ControlQueue string
	// NodeSecret or NodeSecretFile is the secret a node's bodies listener
	// asks processors for.
	NodeSecret, NodeSecretFile string
	// Extra are more KEY=VALUE pairs, set last, so they win.
	Extra []string
}

// Environ is this process's environment with e's variables added.
func (e Env) Environ() []string {
	env := os.Environ()
	for _, kv := range [][2]string{
		{config.EnvDatabaseURL, e.DatabaseURL},
		{config.EnvTemporalAddress, e.TemporalAddress},
		{config.EnvNamespace, e.Namespace},
		{config.EnvControlQueue, e.ControlQueue},
		{config.EnvNodeSecret, e.NodeSecret},
		{config.EnvNodeSecretFile, e.NodeSecretFile},
	} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return append(env, e.Extra...)
}

// NodeOptions say how to run one `spiderpool worker` process.
type NodeOptions struct {
	// Binary is the spiderpool executable.
	Binary string
	// ID and Weight are the node's --node and --weight.
	ID     string
	Weight float64
	// Replicas, when more than 1, is its --replicas: the process then
	// registers ID-1 to ID-<Replicas> (config.Node.IDs).
	Replicas int
	// Flags are more worker flags.
	Flags []string
	// Env is where the node finds Postgres, Temporal and its secret.
	Env Env
	ProcessOptions
}

// Node is a running `spiderpool worker` process.
type Node struct {
	*Process
	ID     string
	Weight float64
	// Identities are the node IDs the process registers.
	Identities []string
}

// StartNode starts a node process as o says. It does not wait for the
// node to register: see WaitRegistered.
func StartNode(o NodeOptions) (*Node, error) {
	args := []string{"worker", "--node", o.ID, "--weight", strconv.FormatFloat(o.Weight, 'g', -1, 64)}
	if o.Replicas > 1 {
		args = append(args, "--replicas", strconv.Itoa(o.Replicas))
	}
	cmd := exec.Command(o.Binary, append(args, o.Flags...)...)
	cmd.Env = o.Env.Environ()
	p, err := StartProcess(cmd, o.ProcessOptions)
	if err != nil {
		return nil, fmt.Errorf("start node %s: %w", o.ID, err)
	}
	return &Node{Process: p, ID: o.ID, Weight: o.Weight, Identities: config.Node{ID: o.ID, Replicas: o.Replicas}.IDs()}, nil
}

// StopNodes stops the nodes all at once (see Process.Stop) and waits until
// every one has exited.
func StopNodes(nodes ...*Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Stop() })
	}
	wg.Wait()
}

// WaitRegistered waits until every identity of the nodes is alive in the
// registry of st, for at most within. It gives up at once when one of the
// node processes exits, or ctx ends.
func WaitRegistered(ctx context.Context, st *store.Store, within time.Duration, nodes ...*Node) error {
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.Identities...)
	}
	deadline := time.Now().Add(within)
	for {
		missing, err := unregistered(ctx, st, ids)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if n := firstExited(nodes); n != nil {
			return fmt.Errorf("node %s (pid %d) exited before it registered: %v", n.ID, n.PID(), n.Err())
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("nodes not registered after %v: %w", within, err)
			}
			return fmt.Errorf("nodes not registered after %v: %s", within, describeMissing(missing))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unregistered is those of ids that are not alive in the registry.
func unregistered(ctx context.Context, st *store.Store, ids []string) ([]string, error) {
	reg, err := st.Nodes(ctx, ids)
	if err != nil {
		return nil, err
	}
	alive := map[string]bool{}
	for _, n := range reg {
		alive[n.ID] = n.Alive
	}
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return alive[id] }), nil
}

// describeMissing names the first few missing node IDs and counts the rest.
func describeMissing(ids []string) string {
	const shown = 5
	if len(ids) <= shown {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], ", "), len(ids)-shown)
}

// firstExited is the first of nodes whose process has exited, or nil.
func firstExited(nodes []*Node) *Node {
	for _, n := range nodes {
		select {
		case <-n.Exited():
			return n
		default:
		}
	}
	return nil
}
