package astjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// reference decodes as the bridge did before: encoding/json with UseNumber, then
// OPA's own conversion.
func reference(t testing.TB, data []byte) (ast.Value, bool) {
	if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		t.Fatalf("InterfaceToValue: %v", err)
	}
	return val, true
}

func TestDecodeObjectMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`,
		` { "a" : 1 } `,
		`{"pod":{"metadata":{"name":"p","labels":{"a/b":"c"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"2"}}}]}}}`,
		`{"n":[-0, 1.5e3, 10E-2, 123456789012345678901234567890], "t":true, "f":false, "z":null}`,
		`{"s":"tab\tquote\"slash\/uni\u00e9 surrogate \ud83d\ude00 \\"}`,
		`{"utf8":"héllo ✓", "empty":"", "arr":[[],{},[{}]]}`,
		"{\"bad utf8\":\"a\xffb\"}",
		`{"k":"v"}` + "\n",
	} {
		t.Run(in, func(t *testing.T) {
			want, ok := reference(t, []byte(in))
			if !ok {
				t.Fatalf("reference refused %q", in)
			}
			got, fields, err := DecodeObject([]byte(in), nil)
			if err != nil {
				t.Fatalf("DecodeObject: %v", err)
			}
			if got.Compare(want) != 0 {
				t.Fatalf("got %v\nwant %v", got, want)
			}
			if named, _, err := DecodeObject([]byte(in), testNames); err != nil || named.Compare(want) != 0 {
				t.Fatalf("with names: got %v, %v\nwant %v", named, err, want)
			}
			if valid, _, err := DecodeValidObject([]byte(in), testNames); err != nil || valid.Compare(want) != 0 {
				t.Fatalf("DecodeValidObject: got %v, %v\nwant %v", valid, err, want)
			}
			for k, f := range fields {
				v, ok := reference(t, []byte(`{"x":`+string(f.Raw)+`}`))
				if !ok || v.(ast.Object).Get(ast.StringTerm("x")).Value.Compare(f.Value) != 0 {
					t.Errorf("field %q: raw %q does not decode to its value %v", k, f.Raw, f.Value)
				}
			}
		})
	}
}

func TestDecodeObjectRefuses(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`[]`, "must be a JSON object"},
		{`"x"`, "must be a JSON object"},
		{``, "unexpected end of JSON input"},
		{`{"a":1`, "unexpected end of JSON input"},
		{`{"a":1}{"b":2}`, "invalid character"},
		{`{"a":01}`, "invalid character"},
		{`{"a":1,"a":2}`, `duplicate field "a"`},
		{`{"pod":{"spec":{},"spec":{"nodeName":"x"}}}`, `duplicate field "spec"`},
		{`{"l":[{"k":1,"j":2,"k":3}]}`, `duplicate field "k"`},
		{`{"name":1,"n\u0061me":2}`, `duplicate field "name"`},
		{manyKeys + `,"k3":0}`, `duplicate field "k3"`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			_, _, err := DecodeObject([]byte(tt.in), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			// What is valid JSON DecodeValidObject refuses alike (a key twice, not an object).
			if Valid([]byte(tt.in)) {
				if _, _, verr := DecodeValidObject([]byte(tt.in), nil); verr == nil || verr.Error() != err.Error() {
					t.Fatalf("DecodeValidObject: got %v, want %v", verr, err)
				}
			}
		})
	}
}

// manyKeys is an object with more members than are compared pairwise, left open.
var manyKeys = func() string {
	s := `{"k0":0`
	for i := 1; i < 40; i++ {
		s += fmt.Sprintf(`,"k%d":%d`, i, i)
	}
	return s
}()

var testNames = NewNames("name", "a", "pod", "spec", "l", "k")

func TestDecodeObjectNames(t *testing.T) {
	got, _, err := DecodeObject([]byte(`{"name":{"name":"name"},"n\u0061me2":1,"other":[{"a":true}]}`), testNames)
	if err != nil {
		t.Fatal(err)
	}
	var keys []*ast.Term
	got.Foreach(func(k, _ *ast.Term) { keys = append(keys, k) })
	inner := got.Get(ast.StringTerm("name")).Value.(ast.Object)
	inner.Foreach(func(k, _ *ast.Term) { keys = append(keys, k) })
	elem := got.Get(ast.StringTerm("other")).Value.(*ast.Array).Elem(0).Value.(ast.Object)
	elem.Foreach(func(k, _ *ast.Term) { keys = append(keys, k) })
	for _, k := range keys {
		name := string(k.Value.(ast.String))
		if shared, ok := testNames[name]; (k == shared) != ok {
			t.Errorf("key %q: shared %v, want shared only when it is one of the names", name, k == shared)
		}
	}
	if v, ok := inner.Get(ast.StringTerm("name")).Value.(ast.String); !ok || v != "name" {
		t.Errorf("a value equal to a name: %v", v)
	}
	if got.Get(ast.StringTerm("name2")) == nil {
		t.Errorf("escaped key not decoded: %v", got)
	}
	if _, _, err := DecodeObject([]byte(manyKeys+"}"), testNames); err != nil {
		t.Errorf("%d distinct keys: %v", 40, err)
	}
}

func TestDecodeObjectKeepsCase(t *testing.T) {
	got, _, err := DecodeObject([]byte(`{"Spec":1,"spec":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 2 {
		t.Fatalf("case-folded keys merged: %v", got)
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,"x",{"b":null}]}`, `{"a":"\u00e9\n"}`, `{"a":1,"a":1}`, "{\"\xff\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, err := DecodeObject(data, testNames)
		if Valid(data) { // what the server passes on checked: decoded alike
			vgot, _, verr := DecodeValidObject(data, testNames)
			if (verr == nil) != (err == nil) || err != nil && verr.Error() != err.Error() || err == nil && vgot.Compare(got) != 0 {
				t.Fatalf("DecodeValidObject: %v, %v; DecodeObject: %v, %v", vgot, verr, got, err)
			}
		}
		want, ok := reference(t, data)
		if err != nil {
			if ok && !strings.Contains(err.Error(), "duplicate field") {
				t.Fatalf("refused what encoding/json accepts: %v", err)
			}
			return
		}
		if !ok {
			t.Fatalf("accepted what encoding/json refuses: %q", data)
		}
		if got.Compare(want) != 0 {
			t.Fatalf("got %v\nwant %v", got, want)
		}
	})
}

func TestAppendCanonical(t *testing.T) {
	sum := func(v ast.Value) [32]byte { return sha256.Sum256(AppendCanonical(nil, v)) }
	parse := func(s string) ast.Value { return ast.MustParseTerm(s).Value }
	distinct := []ast.Value{
		nil, ast.Null{}, ast.Boolean(false), ast.Boolean(true),
		parse(`1`), parse(`"1"`), parse(`""`), parse(`[]`), parse(`{}`), parse(`set()`),
		parse(`["a","b"]`), parse(`["ab"]`), parse(`[["a"],"b"]`), parse(`[["a","b"]]`),
		parse(`{"a":"b"}`), parse(`{"ab":""}`), parse(`{"a":{"b":null}}`), parse(`{"a":{"b":{}}}`),
	}
	seen := map[[32]byte]int{}
	for i, v := range distinct {
		s := sum(v)
		if j, dup := seen[s]; dup {
			t.Errorf("%v and %v hash alike", distinct[j], v)
		}
		seen[s] = i
	}
	if sum(parse(`{"a":1,"b":2}`)) != sum(parse(`{"b":2,"a":1}`)) {
		t.Error("member order changed the hash")
	}
}

func TestFind(t *testing.T) {
	v := ast.MustParseTerm(`{"pod":{"spec":{"containers":[{"name":"c0"},{"name":"c1"}]}}}`).Value
	path := func(s ...any) []*ast.Term {
		var out []*ast.Term
		for _, p := range s {
			out = append(out, ast.NewTerm(ast.MustInterfaceToValue(p)))
		}
		return out
	}
	for _, tt := range []struct {
		path []*ast.Term
		want ast.Value
	}{
		{path("pod", "spec", "containers", 1, "name"), ast.String("c1")},
		{path("pod", "spec", "containers", 2), nil},
		{path("pod", "spec", "containers", "x"), nil},
		{path("pod", "nope"), nil},
		{path("pod", "spec", "containers", 0, "name", "deeper"), nil},
	} {
		got := Find(v, tt.path)
		if (got == nil) != (tt.want == nil) || got != nil && got.Compare(tt.want) != 0 {
			t.Errorf("Find(%v) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestMembers(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{in: `{"input": {"a": [1, "]}", {"b": null}]}, "x": true, "n": -1.5e3 , "s": "q\"}"}`,
			want: map[string]string{"input": `{"a": [1, "]}", {"b": null}]}`, "x": "true", "n": "-1.5e3", "s": `"q\"}"`}},
		{in: ` {} `, want: map[string]string{}},
		{in: `{"input": 1, "input": 2}`, wantErr: `duplicate field "input"`},
		{in: `[1]`, wantErr: "not a JSON object"},
		{in: `{"input": {}`, wantErr: "unexpected end of JSON input"},
	} {
		got, err := Members([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("%s: %v, %v", tt.in, got, err)
		}
		for k, v := range tt.want {
			if string(got[k]) != v {
				t.Errorf("%s: member %q = %s, want %s", tt.in, k, got[k], v)
			}
			if raw, ok := ValidMember([]byte(tt.in), k); !ok || string(raw) != v {
				t.Errorf("%s: ValidMember(%q) = %s, %v, want %s", tt.in, k, raw, ok, v)
			}
		}
		if raw, ok := ValidMember([]byte(tt.in), "absent"); ok {
			t.Errorf("%s: ValidMember(absent) = %s", tt.in, raw)
		}
	}
	if raw, ok := ValidMember([]byte(`{"sp\u0065c": {"a": 1}}`), "spec"); !ok || string(raw) != `{"a": 1}` {
		t.Errorf("an escaped key: ValidMember = %s, %v", raw, ok)
	}
	if _, ok := ValidMember([]byte(`[{"spec": 1}]`), "spec"); ok {
		t.Error("ValidMember found a member in an array")
	}
}

func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"input": {"a": [1, "]}"]}, "b": 2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		members, err := Members(data)
		if err != nil {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("Members accepted what encoding/json refuses: %v", err)
		}
		for k, raw := range members {
			if !bytes.Equal(bytes.TrimSpace(raw), bytes.TrimSpace(want[k])) {
				t.Fatalf("member %q: %q, encoding/json has %q", k, raw, want[k])
			}
			if one, ok := ValidMember(data, k); !ok || !bytes.Equal(one, raw) {
				t.Fatalf("ValidMember(%q) = %q, %v; Members has %q", k, one, ok, raw)
			}
		}
	})
}
