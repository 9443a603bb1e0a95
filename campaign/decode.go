package campaign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// ParseSpec decodes a campaign spec strictly: unknown fields and values of
// the wrong type are errors naming the field ("spec.limits.max_pages: ...").
// It does not apply defaults or validate; see Spec.Normalize.
func ParseSpec(b []byte) (Spec, error) {
	var s Spec
	err := decodeStrict("spec", b, reflect.ValueOf(&s).Elem())
	return s, err
}

// UnmarshalJSON makes every decoder of a Spec strict, including Temporal's
// payload converter when a campaign is started with
// `temporal workflow start --input`. The problem is kept, not returned, so
// that the workflow can fail with it as a clear, non-retryable error instead
// of the SDK failing the workflow task over and over.
func (s *Spec) UnmarshalJSON(b []byte) error {
	parsed, err := ParseSpec(b)
	*s = parsed
	s.decodeErr = err
	return nil
}

var (
	specType        = reflect.TypeFor[Spec]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// decodeStrict decodes b into v, recursing into plain structs so that errors
// carry the full field path.
func decodeStrict(path string, b []byte, v reflect.Value) error {
	t := v.Type()
	// Spec itself is walked field by field; its UnmarshalJSON calls here.
	if t.Kind() != reflect.Struct || (t != specType && reflect.PointerTo(t).Implements(unmarshalerType)) {
		if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %s", path, describeJSONError(err))
		}
		return nil
	}
	trimmed := bytes.TrimSpace(b)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return fmt.Errorf("%s: want a JSON object, got %s", path, kindOf(trimmed))
	}
	byName := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		byName[name] = i
	}
	var errs []error
	for _, key := range sortedKeys(fields) {
		i, ok := byName[key]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown field %q", path, key))
			continue
		}
		if err := decodeStrict(path+"."+key, fields[key], v.Field(i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors come out in a stable order
	return keys
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got %s", friendlyType(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "invalid JSON: " + se.Error()
	}
	return err.Error()
}

func friendlyType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(friendlyType(t.Elem()), "a ")
	}
	return t.String()
}

func kindOf(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}
