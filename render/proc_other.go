//go:build !linux

package render

import "os/exec"

// dieWithUs has no portable equivalent of Linux's parent-death signal.
func dieWithUs(*exec.Cmd) {}

// killLeftovers finds no helpers outside Linux; Close kills the main
// process only.
func killLeftovers(string) int { return 0 }
