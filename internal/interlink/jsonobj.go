package interlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// object is a JSON object that keeps its members in order and their values as the
// exact bytes that were sent, so a body can be changed in one place and forwarded with
// everything else (Secret contents included) untouched.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

// parseObject reads one JSON object. Duplicate keys are refused: two readers (the
// policy and the plugin) could otherwise pick different ones.
func parseObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var obj object
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("reading a key: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		obj = append(obj, member{key: key, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("unterminated object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	return obj, nil
}

// get returns the value of key, or nil when absent.
func (o object) get(key string) json.RawMessage {
	for _, m := range o {
		if m.key == key {
			return m.value
		}
	}
	return nil
}

// set replaces the value of key in place, or appends it.
func (o object) set(key string, value json.RawMessage) object {
	for i := range o {
		if o[i].key == key {
			o[i].value = value
			return o
		}
	}
	return append(o, member{key: key, value: value})
}

// foldedKey returns a key that is not exactly name but that Go's encoding/json (which
// interLink's plugins use) would still read as name, or "".
func (o object) foldedKey(name string) string {
	for _, m := range o {
		if m.key != name && strings.EqualFold(m.key, name) {
			return m.key
		}
	}
	return ""
}

// marshal writes the object back, every value byte for byte as it was read or set.
func (o object) marshal() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, err := marshalNoEscape(m.key)
		if err != nil {
			return nil, err
		}
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// marshalNoEscape encodes v without HTML escaping, which would rewrite <, > and & in
// values that reach a job script.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// isNull reports whether a raw value is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
