// Package control is the operator's side of spiderpool: it connects to
// Temporal and starts, inspects and steers campaigns. The CLI is a thin
// shell over it, and the tests and the demo drive campaigns through it.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
		return nil, fmt.Errorf("cannot reach Temporal at %s: %w", where, silence(ctx, dctx, cfg, err))
	}
	if _, err := c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace}); err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot use Temporal namespace at %s: %w", where, silence(ctx, dctx, cfg, err))
	}
	return c, nil
}

// silence says so when the server never answered: a blackholed address or
// a listener that accepts and stays mute ends in the SDK's "context
// deadline exceeded", which does not tell a person what to change.
func silence(ctx, dctx context.Context, cfg config.Config, err error) error {
	timedOut := errors.Is(dctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		status.Code(err) == codes.DeadlineExceeded // the SDK's own timer may fire a moment before dctx's
	if ctx.Err() == nil && timedOut {
		return fmt.Errorf("no answer within %v (--connect-timeout): %w", cfg.ConnectTimeout, err)
	}
	return err
}

func from(src string) string {
	if src == "" {
		return "default"
	}
	return src
}
