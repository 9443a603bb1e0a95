package campaign

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("500ms", "1m30s"). A bare JSON number is taken as seconds, so
// `"min_delay": 2` means two seconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("want a duration like \"500ms\" or \"2s\", got %q", x)
		}
		*d = Duration(p)
	case float64:
		*d = Duration(x * float64(time.Second))
	case nil:
		*d = 0
	default:
		return fmt.Errorf("want a duration like \"500ms\" or a number of seconds, got %s", b)
	}
	return nil
}
