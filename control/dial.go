// Package control is the operator's side of spiderpool: it connects to
// Temporal and starts, inspects and steers campaigns. The CLI is a thin
// shell over it, and the tests and the demo drive campaigns through it.
package control

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/spiderpool/spiderpool/config"
)

// Dial connects to Temporal and checks the namespace answers within
// cfg.ConnectTimeout. The error names the address and where it came from.
// Each of with may adjust the client options (a node adds its metrics).
func Dial(ctx context.Context, cfg config.Config, logger *slog.Logger, with ...func(*client.Options)) (client.Client, error) {
	where := fmt.Sprintf("%s (namespace %s, address from %s)", cfg.TemporalAddress, cfg.Namespace, from(cfg.From.TemporalAddress))
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	opts := client.Options{
		HostPort:  cfg.TemporalAddress,
		Namespace: cfg.Namespace,
		Logger:    tlog.NewStructuredLogger(logger),
		ConnectionOptions: client.ConnectionOptions{
			GetSystemInfoTimeout: cfg.ConnectTimeout,
		},
	}
	for _, w := range with {
		w(&opts)
	}
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s: %w", where, err)
	}
	if _, err := c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace}); err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot use Temporal namespace at %s: %w", where, err)
	}
	return c, nil
}

func from(src string) string {
	if src == "" {
		return "default"
	}
	return src
}
