// Package strictjson checks a JSON document, already decoded to Rego values (ast.Value),
// against a Go type the way Kubernetes' strict decoding (sigs.k8s.io/json UnmarshalStrict
// with DisallowUnknownFields) would decode it into that type: field names matched
// exactly, unknown fields refused, every value of a kind the field can hold, and the
// types that decode themselves (resource.Quantity, metav1.Time, intstr.IntOrString, …)
// asked. It answers whether the document is a valid value of the type without building
// one, which is most of what a typed decode of a large object costs. Duplicate keys are
// the decoder's to refuse (astjson.DecodeObject does).
package strictjson

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// Type is a Go type's shape as strict JSON decoding sees it. It is read-only once
// built, and safe for concurrent use.
type Type struct{ root *node }

// Names are the JSON field names of every struct in the type, each once, sorted.
func (t *Type) Names() []string {
	seen := map[*node]bool{}
	set := map[string]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		for name, f := range n.fields {
			set[name] = true
			walk(f)
		}
		walk(n.elem)
	}
	walk(t.root)
	return slices.Sorted(maps.Keys(set))
}

type kind uint8

const (
	kindAny         kind = iota // an empty interface: any JSON
	kindPointer                 // null, or elem
	kindUnmarshaler             // a type with its own UnmarshalJSON
	kindString
	kindBool
	kindInt
	kindUint
	kindFloat
	kindStruct
	kindMap
	kindSlice
)

type node struct {
	kind   kind
	goType reflect.Type
	fields map[string]*node // kindStruct: by JSON name
	elem   *node            // kindPointer, kindMap, kindSlice
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// For builds t's shape. It refuses the shapes whose decoding this package does not
// reproduce (",string" fields, non-string map keys, text unmarshalers, Go arrays,
// ambiguous promoted fields, non-empty interfaces): a caller then decodes typed.
func For(t reflect.Type) (*Type, error) {
	b := builder{nodes: map[reflect.Type]*node{}}
	root, err := b.build(t)
	if err != nil {
		return nil, err
	}
	return &Type{root: root}, nil
}

type builder struct{ nodes map[reflect.Type]*node }

func (b *builder) build(t reflect.Type) (*node, error) {
	if n, ok := b.nodes[t]; ok {
		return n, nil // a recursive type: filled in by the caller that made it
	}
	n := &node{goType: t}
	b.nodes[t] = n
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		n.kind = kindUnmarshaler
		return n, nil
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil, fmt.Errorf("%v: text unmarshalers are not supported", t)
	}
	var err error
	switch t.Kind() {
	case reflect.Pointer:
		n.kind = kindPointer
		n.elem, err = b.build(t.Elem())
	case reflect.Interface:
		if t.NumMethod() > 0 {
			return nil, fmt.Errorf("%v: non-empty interfaces are not supported", t)
		}
		n.kind = kindAny
	case reflect.String:
		n.kind = kindString
	case reflect.Bool:
		n.kind = kindBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n.kind = kindInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n.kind = kindUint
	case reflect.Float32, reflect.Float64:
		n.kind = kindFloat
	case reflect.Slice:
		n.kind = kindSlice
		n.elem, err = b.build(t.Elem())
	case reflect.Map:
		if t.Key().Kind() != reflect.String || reflect.PointerTo(t.Key()).Implements(textUnmarshaler) {
			return nil, fmt.Errorf("%v: map keys other than strings are not supported", t)
		}
		n.kind = kindMap
		n.elem, err = b.build(t.Elem())
	case reflect.Struct:
		n.kind = kindStruct
		n.fields, err = b.fields(t)
	default:
		return nil, fmt.Errorf("%v: kind %v is not supported", t, t.Kind())
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// promoted is a field found at some depth of embedding, as encoding/json ranks them.
type promoted struct {
	node   *node
	depth  int
	tagged bool
	count  int // fields of this name at this depth and taggedness: more than one is ambiguous
}

// fields gives a struct's JSON fields by name, with the fields of embedded structs
// promoted as encoding/json does.
func (b *builder) fields(t reflect.Type) (map[string]*node, error) {
	found := map[string]*promoted{}
	if err := b.collect(t, 0, found); err != nil {
		return nil, err
	}
	out := make(map[string]*node, len(found))
	for name, p := range found {
		if p.count > 1 {
			return nil, fmt.Errorf("%v: field %q is ambiguous", t, name)
		}
		out[name] = p.node
	}
	return out, nil
}

func (b *builder) collect(t reflect.Type, depth int, found map[string]*promoted) error {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			return fmt.Errorf("%v.%s: \",string\" fields are not supported", t, f.Name)
		}
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := b.collect(ft, depth+1, found); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		tagged := name != ""
		if !tagged {
			name = f.Name
		}
		n, err := b.build(f.Type)
		if err != nil {
			return err
		}
		switch p, ok := found[name]; {
		case !ok || depth < p.depth || depth == p.depth && tagged && !p.tagged:
			found[name] = &promoted{node: n, depth: depth, tagged: tagged, count: 1}
		case depth == p.depth && tagged == p.tagged:
			p.count++
		}
	}
	return nil
}

// Check reports whether v decodes strictly into the type: the first field that is
// unknown, or whose value the field cannot hold. Top-level members named in skip are
// not checked (the caller checked them before).
func (t *Type) Check(v ast.Value, skip ...string) error {
	c := &checker{path: make([]step, 0, 16)} // deep enough for a pod
	c.visit = c.member
	if obj, ok := v.(ast.Object); ok && len(skip) > 0 && t.root.kind == kindStruct {
		return c.object(t.root, obj, skip)
	}
	return c.check(t.root, v)
}

// checker walks a value, keeping the path to it for errors. The object it is walking
// the members of is described by frame, and visit is its member method bound once:
// closures per object were a fifth of a pod decision's allocations outside the policy.
type checker struct {
	path  []step
	frame frame
	visit func(k, v *ast.Term) bool
}

// frame is the object whose members are being checked: of the struct n (members named
// in skip not checked), or of a map of n.elem when isMap; err is the first error.
type frame struct {
	n     *node
	skip  []string
	isMap bool
	err   error
}

// step is a member name, or an index when name is "".
type step struct {
	name  string
	index int
}

// at is the path of the current value, and of its member name when not "", as
// Kubernetes' strict errors write it ("spec.containers[0].name").
func (c *checker) at(name string) string {
	path := c.path
	if name != "" {
		path = append(path[:len(path):len(path)], step{name: name})
	}
	var b strings.Builder
	for _, s := range path {
		switch {
		case s.name == "":
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + s.name)
		default:
			b.WriteString(s.name)
		}
	}
	return b.String()
}

func (c *checker) push(s step) { c.path = append(c.path, s) }

func (c *checker) pop() { c.path = c.path[:len(c.path)-1] }

func (c *checker) check(n *node, v ast.Value) error {
	switch n.kind {
	case kindAny:
		return nil
	case kindPointer:
		if _, null := v.(ast.Null); null {
			return nil
		}
		return c.check(n.elem, v)
	case kindUnmarshaler:
		data, err := astjson.AppendJSON(nil, v)
		if err != nil {
			return fmt.Errorf("field %q: %w", c.at(""), err)
		}
		target := reflect.New(n.goType).Interface().(json.Unmarshaler)
		if err := target.UnmarshalJSON(data); err != nil {
			return fmt.Errorf("field %q: %w", c.at(""), err)
		}
		return nil
	}
	switch v := v.(type) {
	case ast.Null:
		return nil // null leaves a value as it is, or empties a map or slice
	case ast.String:
		if n.kind == kindString {
			return nil
		}
		if n.kind == kindSlice && n.goType.Elem().Kind() == reflect.Uint8 {
			if _, err := base64.StdEncoding.DecodeString(string(v)); err != nil {
				return fmt.Errorf("field %q: %w", c.at(""), err)
			}
			return nil
		}
	case ast.Boolean:
		if n.kind == kindBool {
			return nil
		}
	case ast.Number:
		if numeric, err := c.number(n, string(v)); numeric {
			return err
		}
	case *ast.Array:
		if n.kind == kindSlice {
			for i := range v.Len() {
				c.push(step{index: i})
				err := c.check(n.elem, v.Elem(i).Value)
				c.pop()
				if err != nil {
					return err
				}
			}
			return nil
		}
	case ast.Object:
		switch n.kind {
		case kindStruct:
			return c.object(n, v, nil)
		case kindMap:
			return c.members(v, frame{n: n, isMap: true})
		}
	}
	return c.mismatch(n, v)
}

// number checks a number literal against a numeric kind; numeric is false for other
// kinds.
func (c *checker) number(n *node, lit string) (numeric bool, err error) {
	var fits bool
	switch n.kind {
	case kindInt:
		i, parseErr := strconv.ParseInt(lit, 10, 64)
		fits = parseErr == nil && !reflect.Zero(n.goType).OverflowInt(i)
	case kindUint:
		u, parseErr := strconv.ParseUint(lit, 10, 64)
		fits = parseErr == nil && !reflect.Zero(n.goType).OverflowUint(u)
	case kindFloat:
		f, parseErr := strconv.ParseFloat(lit, n.goType.Bits())
		fits = parseErr == nil && !reflect.Zero(n.goType).OverflowFloat(f)
	default:
		return false, nil
	}
	if !fits {
		return true, fmt.Errorf("cannot unmarshal number %s into field %q of type %v", lit, c.at(""), n.goType)
	}
	return true, nil
}

func (c *checker) object(n *node, obj ast.Object, skip []string) error {
	return c.members(obj, frame{n: n, skip: skip})
}

// members checks each member of obj against the node f gives for its name.
func (c *checker) members(obj ast.Object, f frame) error {
	outer := c.frame
	c.frame = f
	obj.Until(c.visit)
	err := c.frame.err
	c.frame = outer
	return err
}

// member checks one member of the object of c.frame; true stops at an error.
func (c *checker) member(k, v *ast.Term) bool {
	name, isString := k.Value.(ast.String)
	if !isString {
		c.frame.err = fmt.Errorf("field %q: a key that is not a string", c.at(""))
		return true
	}
	f, known := c.field(string(name))
	if !known {
		c.frame.err = fmt.Errorf("unknown field %q", c.at(string(name)))
		return true
	}
	if f == nil {
		return false // not to be checked
	}
	c.push(step{name: string(name)})
	err := c.check(f, v.Value)
	c.pop()
	c.frame.err = err
	return err != nil
}

// field is the node of the member name of c.frame's object (nil: not to be checked;
// false: unknown).
func (c *checker) field(name string) (*node, bool) {
	if c.frame.isMap {
		return c.frame.n.elem, true
	}
	if slices.Contains(c.frame.skip, name) {
		return nil, true
	}
	f, ok := c.frame.n.fields[name]
	return f, ok
}

func (c *checker) mismatch(n *node, v ast.Value) error {
	return fmt.Errorf("cannot unmarshal %s into field %q of type %v", jsonKind(v), c.at(""), n.goType)
}

func jsonKind(v ast.Value) string {
	switch v.(type) {
	case ast.String:
		return "string"
	case ast.Boolean:
		return "bool"
	case ast.Number:
		return "number"
	case *ast.Array:
		return "array"
	case ast.Object:
		return "object"
	}
	return ast.ValueName(v)
}
