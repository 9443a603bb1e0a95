package devstack

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel send sig to cmd's process when this one
// dies, even by SIGKILL, so a killed test or dev stack leaves no server
// behind. Linux has this (PR_SET_PDEATHSIG); elsewhere it does nothing and
// only a clean exit stops the children (see deathsig_other.go). Call it
// before cmd.Start.
func DieWithParent(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}
