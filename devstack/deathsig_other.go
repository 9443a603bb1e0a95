//go:build !linux

package devstack

import (
	"os/exec"
	"syscall"
)

// DieWithParent does nothing here: only Linux lets a child ask for a
// signal when its parent dies. The dev stack and the tests stop their
// children on every clean exit; a parent killed by SIGKILL leaves them
// running, to be stopped by hand.
func DieWithParent(cmd *exec.Cmd, sig syscall.Signal) {}
