package campaign

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRenderScreenshotIsOffUnlessAskedFor: spec.render.screenshot decodes
// (default false); a typo of its name or a value that is no boolean is an
// error naming the field.
func TestRenderScreenshotIsOffUnlessAskedFor(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"seeds":["http://a/"],"render":{"hosts":["a"]}}`:                    false,
		`{"seeds":["http://a/"],"render":{"hosts":["a"],"screenshot":false}}`: false,
		`{"seeds":["http://a/"],"render":{"hosts":["a"],"screenshot":true}}`:  true,
	} {
		s, err := normalize(t, doc)
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		if s.Render.Screenshot != want {
			t.Errorf("%s: screenshot %v, want %v", doc, s.Render.Screenshot, want)
		}
		// A workflow's input carries the spec as JSON: the field survives.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := DecodeSpec(b); err != nil || again.Render.Screenshot != want {
			t.Errorf("%s: encoded and decoded, screenshot %v (%v), want %v", doc, again.Render.Screenshot, err, want)
		}
	}
	for doc, want := range map[string]string{
		`{"seeds":["http://a/"],"render":{"hosts":["a"],"screenshots":true}}`: `spec.render: unknown field "screenshots"`,
		`{"seeds":["http://a/"],"render":{"hosts":["a"],"screenshot":"yes"}}`: "spec.render.screenshot: want true or false",
	} {
		if _, err := normalize(t, doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}
