package main

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/store"
)

// The end-to-end contract is tests/cli's; this is the classification.
func TestExitCodeClassifiesErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		bodyRan bool
		want    int
	}{
		{"none", nil, true, exitOK},
		{"before the body", errors.New(`unknown flag: --x`), false, exitUsage},
		{"marked usage", usageError(errors.New("bad weight")), true, exitUsage},
		{"no campaign", fmt.Errorf("status: %w", &control.NotFoundError{Campaign: "c"}), true, exitNotFound},
		{"no node", fmt.Errorf("reweight: %w", &control.UnknownNodeError{Node: "n"}), true, exitNotFound},
		{"no campaign row", fmt.Errorf("campaign c: %w", store.ErrNoCampaign), true, exitNotFound},
		{"unreachable", unreachableError(errors.New("cannot reach Temporal")), true, exitUnreachable},
		{"gone mid-command", fmt.Errorf("query: %w", serviceerror.NewUnavailable("down")), true, exitUnreachable},
		{"cancelled", campaignEnded(fmt.Errorf("campaign c: %w", temporal.NewCanceledError())), true, exitCampaignEnded},
		{"failed", campaignEnded(temporal.NewApplicationError("invalid campaign spec", "InvalidSpec")), true, exitCampaignEnded},
		{"waiting cut off", campaignEnded(serviceerror.NewUnavailable("down")), true, exitUnreachable},
		{"anything else", errors.New("disk full"), true, exitFailure},
	} {
		if got := exitCode(tc.err, tc.bodyRan); got != tc.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
