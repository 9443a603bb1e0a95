package main

import (
	"errors"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/store"
)

// Exit codes: a contract with scripts, documented in docs/operations.md ("Exit
// codes") and each exercised by tests/cli.
const (
	exitOK = 0
	// exitFailure is any other error.
	exitFailure = 1
	// exitUsage: the command line, a flag, the configuration or a
	// campaign spec is wrong; nothing was started or changed.
	exitUsage = 2
	// exitUnreachable: Temporal or Postgres could not be reached or used
	// (refused, silent, TLS, credentials, namespace).
	exitUnreachable = 3
	// exitCampaignEnded: the campaign waited on or watched failed, was
	// cancelled, terminated or timed out.
	exitCampaignEnded = 4
	// exitNotFound: no campaign with that ID, or no node of that name in
	// it.
	exitNotFound = 5
)

// codedError carries its exit code.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

func usageError(err error) error       { return withCode(exitUsage, err) }
func unreachableError(err error) error { return withCode(exitUnreachable, err) }

// exitCode is the code a command's error ends the process with. An error
// returned before the command's own body ran (unknown command or flag,
// wrong arguments, bad configuration) is a usage error.
func exitCode(err error, bodyRan bool) int {
	var coded *codedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &coded):
		return coded.code
	case !bodyRan:
		return exitUsage
	case errors.Is(err, control.ErrNotFound), errors.Is(err, store.ErrNoCampaign):
		return exitNotFound
	case unavailable(err):
		return exitUnreachable
	}
	return exitFailure
}

// unavailable is a server that stopped answering mid-command.
func unavailable(err error) bool {
	var u *serviceerror.Unavailable
	if errors.As(err, &u) {
		return true
	}
	switch status.Code(errors.Unwrap(err)) {
	case codes.Unavailable:
		return true
	}
	return status.Code(err) == codes.Unavailable
}

// campaignEnded classifies the error of waiting for a campaign's result:
// the campaign's own end (failed, cancelled, terminated, timed out) is
// exitCampaignEnded; a missing campaign or an unreachable server keeps
// its own code.
func campaignEnded(err error) error {
	var (
		wee        *temporal.WorkflowExecutionError
		cancelled  *temporal.CanceledError
		terminated *temporal.TerminatedError
		timeout    *temporal.TimeoutError
		app        *temporal.ApplicationError
	)
	if errors.As(err, &wee) || errors.As(err, &cancelled) || errors.As(err, &terminated) ||
		errors.As(err, &timeout) || errors.As(err, &app) {
		return withCode(exitCampaignEnded, err)
	}
	return err
}

// interrupted says whether the command was stopped by Ctrl-C or SIGTERM:
// whatever error a wait ended with then, the interruption ended it.
func interrupted(cmd *cobra.Command) bool { return cmd.Context().Err() != nil }

// markBodies wraps the body of every command under root so that bodyRan
// is set once one starts, and gives each command group a body that
// refuses an unknown subcommand (cobra would print help and exit 0).
func markBodies(root *cobra.Command, bodyRan *bool) {
	for _, c := range root.Commands() {
		markBodies(c, bodyRan)
	}
	if root.RunE == nil && root.Run == nil && root.HasSubCommands() && root.HasParent() {
		root.Args = cobra.ArbitraryArgs
		root.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(errors.New(`unknown command "` + args[0] + `" for "` + cmd.CommandPath() + `"` + suggest(cmd, args[0])))
			}
			return cmd.Help()
		}
		return
	}
	if run := root.RunE; run != nil {
		root.RunE = func(cmd *cobra.Command, args []string) error {
			*bodyRan = true
			return run(cmd, args)
		}
	}
	if run := root.Run; run != nil {
		root.Run = func(cmd *cobra.Command, args []string) {
			*bodyRan = true
			run(cmd, args)
		}
	}
}

func suggest(cmd *cobra.Command, typed string) string {
	s := cmd.SuggestionsFor(typed)
	if len(s) == 0 {
		return ""
	}
	return "\n\nDid you mean this?\n\t" + s[0]
}
