package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Bundle is an OPA bundle's content, as the Reloader layers it over the files:
// a module whose base name is an embedded file's replaces that file, as a file
// of Options.Dir does; any other module extends the policy; the bundle's data
// replaces what Options.DataFile holds under each of its roots.
type Bundle struct {
	Name     string
	Revision string
	// Roots are the data paths the bundle owns, slash-separated ("interlink/hpc");
	// none, or "", is the whole of data (OPA's default for a manifest without roots).
	Roots   []string
	Modules []BundleModule
	// Data is the bundle's data document, JSON numbers as json.Number. It is
	// not modified.
	Data map[string]any
}

// BundleModule is one Rego file of a bundle.
type BundleModule struct {
	Path string // inside the bundle, as OPA names it
	Text string
}

// bundleFilePrefix starts the file names of bundle modules, in compile errors and
// in Evaluator.BaseModules' filter.
const bundleFilePrefix = "bundle:"

// addBundles layers bundles over the snapshot's sources (in name order, so that a
// reading fingerprints the same whatever the order they came in). A module that
// replaces an embedded file must declare its package (overlay).
func (s *snapshot) addBundles(bundles []Bundle) error {
	if len(bundles) == 0 {
		return nil
	}
	s.bundles = append([]Bundle(nil), bundles...)
	sort.Slice(s.bundles, func(i, j int) bool { return s.bundles[i].Name < s.bundles[j].Name })
	for _, b := range s.bundles {
		for _, m := range b.Modules {
			if isTestFile(m.Path) {
				continue
			}
			filename := bundleFilePrefix + b.Name + "/" + strings.TrimPrefix(m.Path, "/")
			base := path.Base(m.Path)
			_, replaces := s.embedded[base]
			if !replaces && legacyNames[base] == nil {
				s.sources[filename] = source{filename: filename, text: m.Text}
				continue
			}
			if e, ok := s.embedded[base]; ok && e.text == m.Text && strings.HasPrefix(s.sources[base].filename, embeddedPrefix) {
				// The embedded file itself, shipped in the bundle: it stays the
				// embedded one, so the fast path stays on (fastpath.go).
				continue
			}
			if err := overlay(s.sources, s.embedded, base, source{filename: filename, text: m.Text}); err != nil {
				return fmt.Errorf("bundle %s: %w", b.Name, err)
			}
		}
	}
	return nil
}

// overlayBundleData replaces data under each bundle's roots with the bundle's own.
func overlayBundleData(data map[string]any, bundles []Bundle) (map[string]any, error) {
	for _, b := range bundles {
		roots := b.Roots
		if len(roots) == 0 {
			roots = []string{""}
		}
		for _, root := range roots {
			root = strings.Trim(root, "/")
			if root == "" {
				copied, err := deepCopy(b.Data)
				if err != nil {
					return nil, fmt.Errorf("bundle %s: %w", b.Name, err)
				}
				data, _ = copied.(map[string]any)
				if data == nil { // a bundle without data
					data = map[string]any{}
				}
				continue
			}
			segs := strings.Split(root, "/")
			removePath(data, segs)
			v, ok := lookupPath(b.Data, segs)
			if !ok {
				continue
			}
			copied, err := deepCopy(v)
			if err != nil {
				return nil, fmt.Errorf("bundle %s, root %s: %w", b.Name, root, err)
			}
			if err := setPath(data, segs, copied); err != nil {
				return nil, fmt.Errorf("bundle %s, root %s: %w", b.Name, root, err)
			}
		}
	}
	return data, nil
}

func lookupPath(v any, segs []string) (any, bool) {
	for _, s := range segs {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[s]; !ok {
			return nil, false
		}
	}
	return v, true
}

func removePath(data map[string]any, segs []string) {
	parent, ok := lookupPath(data, segs[:len(segs)-1])
	if obj, isObj := parent.(map[string]any); ok && isObj {
		delete(obj, segs[len(segs)-1])
	}
}

func setPath(data map[string]any, segs []string, v any) error {
	obj := data
	for i, s := range segs[:len(segs)-1] {
		next, ok := obj[s]
		if !ok {
			m := map[string]any{}
			obj[s] = m
			obj = m
			continue
		}
		if obj, ok = next.(map[string]any); !ok {
			return fmt.Errorf("data at %s is not an object", strings.Join(segs[:i+1], "/"))
		}
	}
	obj[segs[len(segs)-1]] = v
	return nil
}

// deepCopy copies a JSON value, numbers kept as json.Number, so that the store
// built from it shares nothing with the bundle.
func deepCopy(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding data: %w", err)
	}
	var out any
	if err := decodeJSON(raw, &out); err != nil {
		return nil, fmt.Errorf("decoding data: %w", err)
	}
	return out, nil
}

// BaseModules returns the compiled modules that came from the embedded policy and
// Options.Dir, not from a bundle: what OPA's own activation of a bundle compiles
// the bundle with (opaplugins).
func (e *Evaluator) BaseModules() map[string]*ast.Module {
	out := map[string]*ast.Module{}
	for name, m := range e.compiler.Modules {
		if !strings.HasPrefix(name, bundleFilePrefix) {
			out[name] = m
		}
	}
	return out
}

// CompilerBuiltins returns the built-ins the policy's compiler knows beyond OPA's
// (the cluster built-ins), for a compiler that must accept the same modules.
func CompilerBuiltins() map[string]*ast.Builtin { return clusterBuiltinDecls }

// ActivateBundles puts in force the policy of the files with bundles layered over
// them, when it compiles, still defines every guarded document the serving policy
// defines (interlink.authz.decision), and accept, called with it, returns nil. The
// files' later changes are then layered under the same bundles. Otherwise the
// serving policy stays, and the error says why.
func (r *Reloader) ActivateBundles(ctx context.Context, bundles []Bundle, accept func(*Evaluator) error) error {
	return r.v.Apply(ctx, r.load(bundles), func(p *loadedPolicy) error {
		if err := accept(p.ev); err != nil {
			return err
		}
		r.bundles.Store(&bundles)
		return nil
	})
}

// decodeJSON decodes raw into v with numbers as json.Number (parseData, deepCopy).
func decodeJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// AddDataFile puts one of the bundle's data files (data.json, data.yaml or data.yml;
// any other file is not data) into b.Data at the path of its directory, as OPA does:
// /a/b/data.json holding {"c": 1} is data.a.b.c. Objects merge key by key; a value
// set twice is an error, as OPA refuses such a bundle.
func (b *Bundle) AddDataFile(file string, raw []byte) error {
	switch path.Base(file) {
	case "data.json", "data.yaml", "data.yml":
	default:
		return nil
	}
	v, err := parseData(file, raw)
	if err != nil {
		return err
	}
	if b.Data == nil {
		b.Data = map[string]any{}
	}
	obj := b.Data
	if dir := strings.Trim(path.Dir(file), "/."); dir != "" {
		for _, seg := range strings.Split(dir, "/") {
			next, ok := obj[seg].(map[string]any)
			if !ok {
				if _, taken := obj[seg]; taken {
					return fmt.Errorf("data file %s: data at %s is not an object", file, seg)
				}
				next = map[string]any{}
				obj[seg] = next
			}
			obj = next
		}
	}
	return mergeData(obj, v, file)
}

// mergeData merges src's keys into dst: objects key by key, anything else only once.
func mergeData(dst, src map[string]any, file string) error {
	for k, v := range src {
		old, exists := dst[k]
		if !exists {
			dst[k] = v
			continue
		}
		oldObj, ok1 := old.(map[string]any)
		newObj, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return fmt.Errorf("data file %s: %s is set twice", file, k)
		}
		if err := mergeData(oldObj, newObj, file); err != nil {
			return err
		}
	}
	return nil
}
