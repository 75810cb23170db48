package astjson

import (
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// AppendJSON appends the JSON encoding of v to dst: the same bytes as
// json.Marshal(ast.JSON(v)), without building the Go values in between (issue 19:
// a decision's answer is encoded once). Sets are arrays; object members are in
// key order. The common shapes (string keys, strings that need no escaping) are
// written directly; anything else is handed to encoding/json for that part.
func AppendJSON(dst []byte, v ast.Value) ([]byte, error) {
	switch x := v.(type) {
	case ast.Null:
		return append(dst, "null"...), nil
	case ast.Boolean:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case ast.String:
		return appendString(dst, string(x))
	case *ast.Array:
		dst = append(dst, '[')
		for i := range x.Len() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendJSON(dst, x.Elem(i).Value); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case ast.Set:
		dst = append(dst, '[')
		first := true
		err := x.Iter(func(t *ast.Term) error {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			var err error
			dst, err = AppendJSON(dst, t.Value)
			return err
		})
		return append(dst, ']'), err
	case ast.Object:
		if out, ok := appendObject(dst, x); ok {
			return out, nil
		}
	}
	return appendSlow(dst, v) // numbers, non-string keys, anything unexpected
}

// appendObject writes an object whose keys are all strings (OPA's key order is then
// encoding/json's); false, with dst as it was, at the first other key or failure.
func appendObject(dst []byte, obj ast.Object) ([]byte, bool) {
	out := append(dst, '{')
	ok, first := true, true
	obj.Foreach(func(k, v *ast.Term) {
		s, isString := k.Value.(ast.String)
		if !ok || !isString {
			ok = false
			return
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		var err error
		if out, err = appendString(out, string(s)); err == nil {
			out, err = AppendJSON(append(out, ':'), v.Value)
		}
		ok = err == nil
	})
	if !ok {
		return dst, false
	}
	return append(out, '}'), true
}

// appendString writes s quoted, escaping a quote or backslash as encoding/json does;
// strings with any other byte it escapes (control characters, <, >, &, anything outside
// ASCII) go through it.
func appendString(dst []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return appendSlow(dst, ast.String(s))
		}
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"'), nil
}

func appendSlow(dst []byte, v ast.Value) ([]byte, error) {
	x, err := ast.JSON(v)
	if err != nil {
		return dst, fmt.Errorf("encoding %s: %w", ast.ValueName(v), err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return dst, fmt.Errorf("encoding %s: %w", ast.ValueName(v), err)
	}
	return append(dst, b...), nil
}
