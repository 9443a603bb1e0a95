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

// ParseSpec decodes a campaign spec as a person wrote it, strictly: unknown
// fields and values of the wrong type are errors naming the field
// ("spec.limits.max_pages: ..."), so a typo is named, never ignored. It
// does not apply defaults or validate; see Spec.Normalize.
func ParseSpec(b []byte) (Spec, error) {
	return decodeSpec(b, true)
}

// DecodeSpec decodes a spec a program wrote: a workflow's input, an
// activity's payload, the copy stored in Postgres. Values of the wrong type
// are errors as in ParseSpec, but a field this version does not know is
// not: a newer node may have written it, and during a rolling upgrade this
// node must still run the campaign. Such fields are kept aside and written
// out again by MarshalJSON, so a spec that passes through an older node
// (stored, carried across continue-as-new) keeps what the newer one set.
func DecodeSpec(b []byte) (Spec, error) {
	return decodeSpec(b, false)
}

// UnmarshalJSON decodes as DecodeSpec: it is what Temporal's payload
// converter calls for workflow inputs and activity payloads, which a node
// of another version may have written. A problem is kept, not returned, so
// that the workflow can fail with it as a clear, non-retryable error
// instead of the SDK failing the workflow task over and over.
func (s *Spec) UnmarshalJSON(b []byte) error {
	parsed, err := DecodeSpec(b)
	*s = parsed
	s.decodeErr = err
	return nil
}

// MarshalJSON writes the spec, with the fields DecodeSpec kept aside put
// back where they were. A spec without any is written exactly as
// encoding/json writes its fields.
func (s Spec) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainSpec(s))
	if err != nil || len(s.unknown) == 0 {
		return b, err
	}
	return mergeUnknown(b, s.unknown)
}

// plainSpec is Spec without its methods, for encoding/json.
type plainSpec Spec

// UnknownFields lists the fields the spec was decoded with that this
// version does not know ("spec.politeness.new_knob"), sorted. They are
// ignored here; newer nodes may act on them.
func (s Spec) UnknownFields() []string {
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+"."+k, sub)
			} else {
				out = append(out, prefix+"."+k)
			}
		}
	}
	walk("spec", s.unknown)
	slices.Sort(out)
	return out
}

var (
	specType        = reflect.TypeFor[Spec]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

func decodeSpec(b []byte, strict bool) (Spec, error) {
	var s Spec
	d := specDecoder{strict: strict}
	err := d.decode(nil, b, reflect.ValueOf(&s).Elem())
	s.unknown = d.unknown
	return s, err
}

// specDecoder decodes into a Spec, recursing into plain structs so that
// errors carry the full field path.
type specDecoder struct {
	strict bool
	// unknown holds the fields no struct has, as a tree of objects by
	// key: a leaf is the field's json.RawMessage, an inner node a
	// map[string]any of the object's unknown fields.
	unknown map[string]any
}

func fieldPath(keys []string) string {
	return strings.Join(append([]string{"spec"}, keys...), ".")
}

// decode decodes b into v, found at keys below the spec.
func (d *specDecoder) decode(keys []string, b []byte, v reflect.Value) error {
	t := v.Type()
	// Spec itself is walked field by field; its UnmarshalJSON calls here.
	if t.Kind() != reflect.Struct || (t != specType && reflect.PointerTo(t).Implements(unmarshalerType)) {
		if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %s", fieldPath(keys), describeJSONError(err))
		}
		return nil
	}
	trimmed := bytes.TrimSpace(b)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return fmt.Errorf("%s: want a JSON object, got %s", fieldPath(keys), kindOf(trimmed))
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
			if d.strict {
				errs = append(errs, fmt.Errorf("%s: unknown field %q", fieldPath(keys), key))
			} else {
				d.keep(keys, key, fields[key])
			}
			continue
		}
		if err := d.decode(append(slices.Clip(keys), key), fields[key], v.Field(i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// keep records an unknown field for MarshalJSON.
func (d *specDecoder) keep(keys []string, key string, value json.RawMessage) {
	if d.unknown == nil {
		d.unknown = map[string]any{}
	}
	m := d.unknown
	for _, k := range keys {
		sub, ok := m[k].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[k] = sub
		}
		m = sub
	}
	m[key] = slices.Clone(value)
}

// mergeUnknown puts the unknown fields back into the JSON object b.
func mergeUnknown(b []byte, unknown map[string]any) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("spec: merging unknown fields back: %w", err)
	}
	for k, v := range unknown {
		switch v := v.(type) {
		case json.RawMessage:
			obj[k] = v
		case map[string]any:
			inner, ok := obj[k]
			if !ok {
				return nil, fmt.Errorf("spec: unknown fields below %q, which was not written", k)
			}
			merged, err := mergeUnknown(inner, v)
			if err != nil {
				return nil, err
			}
			obj[k] = merged
		}
	}
	return json.Marshal(obj)
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
