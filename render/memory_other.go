//go:build !linux

package render

import "errors"

// renderersOver cannot read a process's memory outside Linux: the
// JavaScript heap's cap alone bounds a page there.
func renderersOver(string, int64) map[int]int64 { return nil }

func killProcess(int) error { return errors.ErrUnsupported }
