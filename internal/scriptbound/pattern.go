package scriptbound

import (
	"fmt"
	"strings"
)

// A pattern names fields from the create body's root, Go-template style:
//
//	pod.spec.volumes[].hostPath.path         a member; [] is every element of an array
//	pod.metadata.annotations["interlink.eu/pod-ip"]   a member whose name has dots
//	pod.spec.*containers[].*Probe            * in a name matches any run of characters, without case
//	container[].configMaps[].data{}          {} is the keys of an object (not its values)
//
// A row covers its field and everything under it, unless a more specific row covers
// part of it; a name without * is more specific than one with.
type segment struct {
	name  string // "" for an array's elements
	glob  bool   // name has a *
	array bool   // the elements of an array
	keys  bool   // the keys of an object
}

func parsePattern(p string) ([]segment, error) {
	var segs []segment
	for rest := p; rest != ""; {
		var seg segment
		switch {
		case strings.HasPrefix(rest, "[\""):
			end := strings.Index(rest, "\"]")
			if end < 0 {
				return nil, fmt.Errorf("pattern %q: unclosed [\"", p)
			}
			seg.name, rest = rest[2:end], rest[end+2:]
		case strings.HasPrefix(rest, "[]"):
			seg.array, rest = true, rest[2:]
		case strings.HasPrefix(rest, "{}"):
			seg.keys, rest = true, rest[2:]
		default:
			rest = strings.TrimPrefix(rest, ".")
			end := strings.IndexAny(rest, ".[{")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return nil, fmt.Errorf("pattern %q: empty name", p)
			}
			seg.name, rest = rest[:end], rest[end:]
		}
		seg.glob = strings.Contains(seg.name, "*")
		segs = append(segs, seg)
	}
	return segs, nil
}

func (s segment) matches(name string) bool {
	if !s.glob {
		return s.name == name
	}
	// Without case, so that *containers covers initContainers: matching more names
	// only ever makes the check stricter.
	prefix, suffix, _ := strings.Cut(s.name, "*")
	return len(name) >= len(prefix)+len(suffix) &&
		strings.EqualFold(name[:len(prefix)], prefix) && strings.EqualFold(name[len(name)-len(suffix):], suffix)
}

// node is a step of the compiled table: the row that ends here, if any, and the
// steps below.
type node struct {
	row      *Row
	members  map[string]*node // exact names
	globs    []globChild      // longest pattern first
	elements *node            // []
	keys     *node            // {}
}

type globChild struct {
	seg segment
	n   *node
}

func compile(rows []Row) (*node, error) {
	root := &node{}
	for i := range rows {
		segs, err := parsePattern(rows[i].Field)
		if err != nil {
			return nil, err
		}
		n := root
		for _, s := range segs {
			n = n.child(s)
		}
		if n.row != nil {
			return nil, fmt.Errorf("field %q is in the table twice", rows[i].Field)
		}
		n.row = &rows[i]
	}
	return root, nil
}

func (n *node) child(s segment) *node {
	switch {
	case s.array:
		if n.elements == nil {
			n.elements = &node{}
		}
		return n.elements
	case s.keys:
		if n.keys == nil {
			n.keys = &node{}
		}
		return n.keys
	case s.glob:
		for _, g := range n.globs {
			if g.seg.name == s.name {
				return g.n
			}
		}
		c := &node{}
		n.globs = append(n.globs, globChild{s, c})
		// Longest first: the more specific glob wins.
		for i := len(n.globs) - 1; i > 0 && len(n.globs[i].seg.name) > len(n.globs[i-1].seg.name); i-- {
			n.globs[i], n.globs[i-1] = n.globs[i-1], n.globs[i]
		}
		return c
	}
	if n.members == nil {
		n.members = map[string]*node{}
	}
	if c, ok := n.members[s.name]; ok {
		return c
	}
	c := &node{}
	n.members[s.name] = c
	return c
}

// member is the step for an object member name, nil when no row goes there.
func (n *node) member(name string) *node {
	if n == nil {
		return nil
	}
	if c, ok := n.members[name]; ok {
		return c
	}
	for _, g := range n.globs {
		if g.seg.matches(name) {
			return g.n
		}
	}
	return nil
}
