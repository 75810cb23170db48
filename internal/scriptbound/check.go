package scriptbound

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Finding is a string a plugin would write where it is not inert.
type Finding struct {
	Plugin string
	Field  string // the field, from where the walk started: spec.containers[0].args[1]
	Row    string // the table's pattern that covers it; "" for a field no row names
	How    How
	Err    error
	// Detail, when set, is the whole reason (a rule across fields, no row's).
	Detail string
	rule   Rule // the row's, for an unquoted field
}

// Message names the field, how the plugin writes it and what is wrong, never the
// value (it may be a credential).
func (f Finding) Message() string {
	plugin := map[string]string{SLURM: "the SLURM plugin", HTCondor: "the HTCondor plugin"}[f.Plugin]
	switch f.How {
	case Unseen:
		return fmt.Sprintf("%s: %s resolves its value later and writes it unquoted into the job script, so it cannot be judged", f.Field, plugin)
	case DoubleQuoted:
		return fmt.Sprintf("%s %v: %s writes it between double quotes into the job script, where the shell would still expand it; allowed: %s", f.Field, f.Err, plugin, DoubleQuotedText)
	}
	if f.Detail != "" {
		return f.Field + " " + f.Detail
	}
	row := f.Row
	if row == "" {
		return fmt.Sprintf("%s %v: no plugin is known to quote it, so it counts as written unquoted into the job script; allowed: %s", f.Field, f.Err, Word)
	}
	return fmt.Sprintf("%s %v: %s writes it unquoted into the job script; allowed: %s", f.Field, f.Err, plugin, f.rule)
}

var root = func() *node {
	n, err := compile(Table)
	if err != nil {
		panic(err) // the table is a constant of this package, tested
	}
	return n
}()

// CheckPod walks every string of a pod value (input.pod) and returns, for each plugin,
// the strings it would write where they are not inert.
func CheckPod(pod ast.Value) []Finding {
	w := walker{path: make([]step, 0, 16)}
	w.value(root.member("pod"), [2]*Row{}, pod)
	if obj, ok := pod.(ast.Object); ok {
		w.htcondorImages(obj)
	}
	return w.findings
}

// htcondorImages: the HTCondor plugin writes an absolute image path outside /cvmfs
// after the htcondor-job.knoc.io/image-root annotation, and as nothing at all when the
// pod has none: the command's first word would then stand where singularity reads
// the image, and its options before it.
func (w *walker) htcondorImages(pod ast.Object) {
	if get(pod, imageRootPath) != nil {
		return
	}
	cs, ok := get(pod, containersPath).(*ast.Array)
	if !ok {
		return
	}
	for i := range cs.Len() {
		image, ok := get(cs.Elem(i).Value, imagePath).(ast.String)
		if !ok || !strings.HasPrefix(string(image), "/") || strings.HasPrefix(string(image), "/cvmfs") {
			continue
		}
		w.findings = append(w.findings, Finding{Plugin: HTCondor, Field: FieldName([]any{"spec", "containers", i, "image"}), How: Unquoted,
			Detail: fmt.Sprintf("is an absolute path outside /cvmfs and the pod has no annotation %q, so the HTCondor plugin would write no image and the command's first word would take its place", "htcondor-job.knoc.io/image-root")})
	}
}

// The paths htcondorImages reads, as terms made once (CheckPod runs on every pod
// decision).
var (
	imageRootPath  = pathOf("metadata", "annotations", "htcondor-job.knoc.io/image-root")
	containersPath = pathOf("spec", "containers")
	imagePath      = pathOf("image")
)

func pathOf(names ...string) []*ast.Term {
	path := make([]*ast.Term, len(names))
	for i, n := range names {
		path[i] = ast.StringTerm(n)
	}
	return path
}

// get is the value at a path of member names, nil when there is none.
func get(v ast.Value, path []*ast.Term) ast.Value {
	for _, n := range path {
		obj, ok := v.(ast.Object)
		if !ok {
			return nil
		}
		t := obj.Get(n)
		if t == nil {
			return nil
		}
		v = t.Value
	}
	return v
}

// CheckBody walks a /create body's members other than "pod" (decided as a pod).
func CheckBody(body ast.Object) []Finding {
	var w walker
	body.Foreach(func(k, v *ast.Term) {
		name, ok := k.Value.(ast.String)
		if !ok || name == "pod" {
			return
		}
		w.path = append(w.path[:0], step{name: string(name), index: -1})
		w.value(root.member(string(name)), [2]*Row{}, v.Value)
	})
	return w.findings
}

// walker walks a value beside the compiled table. rows holds, per plugin (in the
// order of Plugins), the row that covers the current field; nil is the default
// (unquoted, a plain word). A plugin for which the field is settled (not written,
// escaped, judged elsewhere, or already reported) walks on with muted set.
type walker struct {
	path     []step // from the start; named only for a finding
	findings []Finding
}

// step is a member name, or an index when name is "" and index >= 0.
type step struct {
	name  string
	index int
}

var mutedRow = &Row{Field: "(muted)"}

func (w *walker) value(n *node, rows [2]*Row, v ast.Value) {
	if n != nil && n.row != nil {
		for i, p := range Plugins {
			if rows[i] == mutedRow {
				continue
			}
			rows[i] = n.row
			if wr := n.row.For(p); wr.How == Unseen {
				w.report(p, n.row, wr.How, nil)
				rows[i] = mutedRow
			}
		}
	}
	if !w.checks(rows) && n.leaf() {
		return // nothing below is written, and no row below says otherwise
	}
	switch v := v.(type) {
	case ast.String:
		for i, p := range Plugins {
			w.checkString(p, rows[i], string(v))
		}
	case ast.Object:
		v.Foreach(func(k, val *ast.Term) {
			name, ok := k.Value.(ast.String)
			if !ok {
				return
			}
			w.path = append(w.path, step{name: string(name), index: -1})
			if n != nil && n.keys != nil && n.keys.row != nil {
				for _, p := range Plugins {
					w.checkString(p, n.keys.row, string(name))
				}
			}
			w.value(n.member(string(name)), rows, val.Value)
			w.path = w.path[:len(w.path)-1]
		})
	case *ast.Array:
		var elements *node
		if n != nil {
			elements = n.elements
		}
		for i := range v.Len() {
			w.path = append(w.path, step{index: i})
			w.value(elements, rows, v.Elem(i).Value)
			w.path = w.path[:len(w.path)-1]
		}
	}
}

// leaf: no row below n.
func (n *node) leaf() bool {
	return n == nil || len(n.members) == 0 && len(n.globs) == 0 && n.elements == nil && n.keys == nil
}

// checks: some plugin checks the strings of the current field.
func (w *walker) checks(rows [2]*Row) bool {
	for i, p := range Plugins {
		if rows[i] == nil {
			return true
		}
		if rows[i] == mutedRow {
			continue
		}
		if h := rows[i].For(p).How; h == Unquoted || h == DoubleQuoted {
			return true
		}
	}
	return false
}

func (w *walker) checkString(plugin string, row *Row, v string) {
	if row == mutedRow {
		return
	}
	wr := Writing{How: Unquoted, Rule: Word}
	if row != nil {
		wr = row.For(plugin)
	}
	var err error
	switch wr.How {
	case Unquoted:
		err = wr.Rule.Check(v)
	case DoubleQuoted:
		err = DoubleQuotedText.Check(v)
	default:
		return
	}
	if err != nil {
		w.report(plugin, row, wr.How, err)
	}
}

func (w *walker) report(plugin string, row *Row, how How, err error) {
	path := make([]any, len(w.path))
	for i, s := range w.path {
		if s.index >= 0 {
			path[i] = s.index
		} else {
			path[i] = s.name
		}
	}
	f := Finding{Plugin: plugin, Field: FieldName(path), How: how, Err: err}
	if row != nil {
		f.Row, f.rule = row.Field, row.For(plugin).Rule
	}
	w.findings = append(w.findings, f)
}

// FieldName writes a path as kubectl's JSONPath-like names do: spec.containers[0].env[2].value,
// metadata.annotations["interlink.eu/pod-ip"].
func FieldName(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			b.WriteString("[" + strconv.Itoa(p) + "]")
		case string:
			if isIdentifier(p) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(p)
			} else {
				b.WriteString("[" + strconv.Quote(p) + "]")
			}
		}
	}
	return b.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
