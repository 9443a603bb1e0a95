package render

import "testing"

// A Chromium process is ours by its whole --user-data-dir argument, as
// the kernel keeps it (NULs between) or as a helper rewrote its title
// (spaces between), also when the profile's path holds a space.
func TestHasArg(t *testing.T) {
	want := []byte("--user-data-dir=/tmp/a b/chromium-1")
	for _, c := range []struct {
		cmdline string
		ours    bool
	}{
		{"/usr/lib/chromium/chromium\x00--headless\x00--user-data-dir=/tmp/a b/chromium-1\x00", true},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/a b/chromium-1 --lang=en", true},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/a b/chromium-1", true},
		{"/usr/lib/chromium/chromium\x00--user-data-dir=/tmp/a b/chromium-12\x00", false},
		{"/usr/lib/chromium/chromium --user-data-dir=/tmp/a b/chromium-12 --user-data-dir=/tmp/a b/chromium-1x", false},
		{"/usr/lib/chromium/chromium --user-data-dir=/tmp/a b/chromium-12 --user-data-dir=/tmp/a b/chromium-1", true},
		{"x--user-data-dir=/tmp/a b/chromium-1", false},
	} {
		if got := hasArg([]byte(c.cmdline), want); got != c.ours {
			t.Errorf("hasArg(%q) = %v, want %v", c.cmdline, got, c.ours)
		}
	}
}
