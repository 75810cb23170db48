// Package astjson reads JSON straight into OPA's value form (ast.Value), the form a
// prepared query evaluates, so a request body is decoded once instead of into Go maps
// and then converted; and it hashes such values canonically for memo keys.
package astjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Field is one member of a decoded top-level object: its value, and the exact bytes it
// was decoded from, for a caller that also needs a typed reading of that member.
type Field struct {
	Value ast.Value
	Raw   []byte
}

// Names are object member names decoded to shared terms: the field names of the
// documents a caller expects, so that each decoded key found here costs no allocation.
// A Names is read-only once built, and its terms are never modified.
type Names map[string]*ast.Term

// NewNames interns names.
func NewNames(names ...string) Names {
	n := make(Names, len(names))
	for _, name := range names {
		n[name] = ast.StringTerm(name)
	}
	return n
}

// DecodeObject decodes data, which must be one JSON object, into an ast.Object. Keys are
// kept as sent (case-sensitive) and a key given twice in any object is an error, as
// Kubernetes' strict decoding has it; numbers keep their literal text. fields gives each
// top-level member's value and raw bytes. Keys found in names (which may be nil) share
// its terms.
func DecodeObject(data []byte, names Names) (obj ast.Object, fields map[string]Field, err error) {
	if !Valid(data) {
		var v any // let encoding/json name the syntax error
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, nil, err
		}
		return nil, nil, errors.New("invalid JSON")
	}
	return DecodeValidObject(data, names)
}

// DecodeValidObject is DecodeObject for data known to be valid JSON: a member Members
// returned (Members checked the whole document), so that a request body is checked
// once, not once by the server and again by the decision. Anything else must go
// through DecodeObject: data that Valid would refuse is not checked here.
func DecodeValidObject(data []byte, names Names) (obj ast.Object, fields map[string]Field, err error) {
	s := stacksPool.Get().(*stacks)
	defer s.release()
	d := decoder{data: data, names: names, stacks: s}
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return nil, nil, errors.New("input must be a JSON object")
	}
	fields = map[string]Field{}
	v, err := d.object(fields)
	if err != nil {
		return nil, nil, err
	}
	return v.(ast.Object), fields, nil
}

// stacks hold the members of the objects and arrays being read until each is built
// with its final size; they are reused from one decoding to the next.
type stacks struct {
	items [][2]*ast.Term
	keys  []string // the member names of items, to find a name given twice
	elems []*ast.Term
}

var stacksPool = sync.Pool{New: func() any { return new(stacks) }}

// release returns s to the pool, holding no value of the document it read.
func (s *stacks) release() {
	clear(s.items[:cap(s.items)])
	clear(s.keys[:cap(s.keys)])
	clear(s.elems[:cap(s.elems)])
	s.items, s.keys, s.elems = s.items[:0], s.keys[:0], s.elems[:0]
	stacksPool.Put(s)
}

// decoder walks JSON already checked by Valid, so it only has to build values.
// Terms are cut from blocks rather than allocated one by one.
type decoder struct {
	data  []byte
	pos   int
	names Names
	terms []ast.Term // the unused rest of the current block
	*stacks
}

// termBlock is how many terms are allocated at once: a pod as interLink sends it holds
// about a hundred.
const termBlock = 64

func (d *decoder) term(v ast.Value) *ast.Term {
	if len(d.terms) == 0 {
		d.terms = make([]ast.Term, termBlock)
	}
	t := &d.terms[0]
	d.terms = d.terms[1:]
	t.Value = v
	return t
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value() (ast.Value, error) {
	d.skipSpace()
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(nil)
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return ast.String(s), nil
	case c == 't':
		d.pos += len("true")
		return ast.Boolean(true), nil
	case c == 'f':
		d.pos += len("false")
		return ast.Boolean(false), nil
	case c == 'n':
		d.pos += len("null")
		return ast.Null{}, nil
	default:
		return d.number(), nil
	}
}

// object reads an object at d.pos; when top is not nil it also records each member.
func (d *decoder) object(top map[string]Field) (ast.Value, error) {
	d.pos++ // '{'
	base := len(d.items)
	defer func() { d.items, d.keys = d.items[:base], d.keys[:base] }()
	for {
		d.skipSpace()
		if d.data[d.pos] == '}' {
			d.pos++
			if err := duplicate(d.keys[base:]); err != nil {
				return nil, err
			}
			return ast.NewObject(d.items[base:]...), nil
		}
		if d.data[d.pos] == ',' {
			d.pos++
			d.skipSpace()
		}
		key, err := d.key()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		d.pos++ // ':'
		d.skipSpace()
		start := d.pos
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		if top != nil {
			top[string(key.Value.(ast.String))] = Field{Value: v, Raw: d.data[start:d.pos]}
		}
		d.items = append(d.items, [2]*ast.Term{key, d.term(v)})
		d.keys = append(d.keys, string(key.Value.(ast.String)))
	}
}

// duplicate refuses a member name given twice, as Kubernetes' strict decoding does
// (ast.NewObject would keep both).
func duplicate(keys []string) error {
	if len(keys) <= 16 {
		for i := 1; i < len(keys); i++ {
			for _, k := range keys[:i] {
				if k == keys[i] {
					return fmt.Errorf("duplicate field %q", k)
				}
			}
		}
		return nil
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			return fmt.Errorf("duplicate field %q", k)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// key reads a member name, as its shared term when names has it.
func (d *decoder) key() (*ast.Term, error) {
	start := d.pos
	d.skipString()
	if t, ok := d.names[string(d.data[start+1:d.pos-1])]; ok && !bytes.ContainsAny(d.data[start:d.pos], "\\") {
		return t, nil
	}
	d.pos = start
	s, err := d.string()
	if err != nil {
		return nil, err
	}
	return d.term(ast.String(s)), nil
}

func (d *decoder) array() (ast.Value, error) {
	d.pos++ // '['
	base := len(d.elems)
	defer func() { d.elems = d.elems[:base] }()
	for {
		d.skipSpace()
		switch d.data[d.pos] {
		case ']':
			d.pos++
			return ast.NewArray(slices.Clone(d.elems[base:])...), nil
		case ',':
			d.pos++
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, d.term(v))
	}
}

// string reads a string literal. Plain ones (no escapes, valid UTF-8) are sliced;
// others go through encoding/json, which also replaces invalid UTF-8 as the typed
// decoders of the same body do.
func (d *decoder) string() (string, error) {
	start := d.pos
	d.pos++ // '"'
	plain := true
	for {
		c := d.data[d.pos]
		if c == '"' {
			break
		}
		if c == '\\' {
			plain = false
			d.pos++
		} else if c >= utf8.RuneSelf {
			plain = false
		}
		d.pos++
	}
	d.pos++ // closing '"'
	lit := d.data[start:d.pos]
	if plain {
		return string(lit[1 : len(lit)-1]), nil
	}
	if utf8.Valid(lit) && bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", fmt.Errorf("decoding string: %w", err)
	}
	return s, nil
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// number reads a number literal as its text, as encoding/json's UseNumber does.
func (d *decoder) number() ast.Value {
	start := d.pos
	for d.pos < len(d.data) && isNumberByte(d.data[d.pos]) {
		d.pos++
	}
	return ast.Number(d.data[start:d.pos])
}

// Members checks that data is one JSON object and returns its members' raw bytes by
// key, without decoding them: a request envelope whose one member of interest is
// decoded later, once. A key given twice is an error.
func Members(data []byte) (map[string][]byte, error) {
	if !Valid(data) {
		var v any // let encoding/json name the syntax error
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err
		}
		return nil, errors.New("invalid JSON")
	}
	return ValidMembers(data)
}

// ValidMembers is Members for data known to be valid JSON: a Field.Raw of
// DecodeObject, or a member Members returned. It checks only that data is an object
// and has no key twice.
func ValidMembers(data []byte) (map[string][]byte, error) {
	d := decoder{data: data}
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return nil, errors.New("not a JSON object")
	}
	d.pos++
	members := map[string][]byte{}
	for {
		d.skipSpace()
		switch d.data[d.pos] {
		case '}':
			return members, nil
		case ',':
			d.pos++
			d.skipSpace()
		}
		key, err := d.string()
		if err != nil {
			return nil, err
		}
		if _, dup := members[key]; dup {
			return nil, fmt.Errorf("duplicate field %q", key)
		}
		d.skipSpace()
		d.pos++ // ':'
		d.skipSpace()
		start := d.pos
		d.skipValue()
		members[key] = d.data[start:d.pos]
	}
}

// ValidMember is the raw bytes of data's member name, for data known to be a valid
// JSON object with no key twice (a Field.Raw of DecodeObject, which refuses a key given
// twice): found only, with no map of every member built. ok is false when data has no
// such member or is not an object.
func ValidMember(data []byte, name string) (raw []byte, ok bool) {
	d := decoder{data: data}
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return nil, false
	}
	d.pos++
	for {
		d.skipSpace()
		switch d.data[d.pos] {
		case '}':
			return nil, false
		case ',':
			d.pos++
			d.skipSpace()
		}
		key, err := d.string()
		if err != nil {
			return nil, false
		}
		d.skipSpace()
		d.pos++ // ':'
		d.skipSpace()
		start := d.pos
		d.skipValue()
		if key == name {
			return d.data[start:d.pos], true
		}
	}
}

// skipValue moves past the value at d.pos (valid JSON).
func (d *decoder) skipValue() {
	switch d.data[d.pos] {
	case '"':
		d.skipString()
	case '{', '[':
		for depth := 0; ; {
			switch d.data[d.pos] {
			case '"':
				d.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			d.pos++
			if depth == 0 {
				return
			}
		}
	default: // a number, true, false or null
		for d.pos < len(d.data) && !isDelimiter(d.data[d.pos]) {
			d.pos++
		}
	}
}

func (d *decoder) skipString() {
	d.pos++ // '"'
	for d.data[d.pos] != '"' {
		if d.data[d.pos] == '\\' {
			d.pos++
		}
		d.pos++
	}
	d.pos++
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
