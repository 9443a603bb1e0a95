// Package colocate runs a processor and a spiderpool node in one process:
// one binary that both crawls and processes. It sits apart from package
// processor so that a processor on its own links none of a node's
// machinery (Postgres, workflows, activities, fx).
package colocate

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/workers"
)

// Run runs p as p.Run(ctx, opts...) does, beside a spiderpool node with
// this ID and weight. The node's settings come from the environment as for
// `spiderpool worker` (DATABASE_URL, TEMPORAL_ADDRESS, SPIDERPOOL_*
// variables), and it logs where p does. It starts before p polls and stops
// after p does, handing its unfetched URLs back, when ctx is done or the
// process gets SIGINT or SIGTERM.
func Run(ctx context.Context, p *processor.Processor, id string, weight float64, opts ...processor.Option) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.NodeFromEnv()
	if err != nil {
		return err
	}
	cfg.Node.ID, cfg.Node.Weight = id, weight
	if err := cfg.ValidateNode(); err != nil {
		return err
	}
	node := workers.Node(cfg, p.Log())
	if err := node.Start(ctx); err != nil {
		return workers.RootCause(err)
	}
	defer node.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // logged by the node
	return p.Run(ctx, opts...)
}
