// Package policies embeds sar-bridge's default Rego policy and evaluates
// documents under data.* the way OPA's Data API does.
package policies

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/util"
	"k8s.io/utils/lru"
	"sigs.k8s.io/yaml"
)

// The default policy: the decision (rego/authz.rego), the helpers its rules share
// (rego/authz_helpers.rego), a library (rego/kubernetes_api_client.rego), and each
// built-in rule in its own directory (rules/<name>/, gatekeeper-library style: its
// Rego, its tests, its rule.json and samples). Every file's base name is unique: a
// file of Options.Dir or a bundle replaces the embedded file of its base name.
//
//go:embed rego/*.rego rules/*/*.rego
var embedded embed.FS

// embeddedDirs are the embedded trees, read in full.
var embeddedDirs = []string{"rego", "rules"}

// legacyNames are file names that replaced more than one embedded file: the
// restricted annotations and images rules were interlink.rego, which a policy
// directory or bundle may still ship (docs/policies.md, "Replacing a file").
var legacyNames = map[string][]string{
	"interlink.rego": {"restricted_annotations.rego", "images.rego"},
}

const (
	// cacheSize bounds prepared queries; paths come from callers, so the
	// cache must not grow with whatever they send.
	cacheSize = 128
	// maxCachedPathBytes bounds the key of a prepared query: a longer path (a caller's
	// made-up URL) is prepared again each time rather than kept.
	maxCachedPathBytes = 1 << 10
)

// Options configures New.
type Options struct {
	// Dir optionally holds *.rego files that extend the embedded defaults.
	// A file whose base name equals an embedded file's replaces it (and
	// interlink.rego the two files of legacyNames), and must declare that
	// file's package; *_test.rego files are ignored.
	Dir string
	// DataFile optionally names a JSON or YAML file holding an object that
	// becomes `data`.
	DataFile string
	// Cluster serves the k8s.get and k8s.list built-ins (cluster.go); nil:
	// calling them is an evaluation error.
	Cluster ClusterReader
	// AllowRelaxingSafetyRules lets data.interlink.enforcement set the safety rules
	// (SafetyRules) to warn or audit; without it such data is a load error
	// (enforcement.go).
	AllowRelaxingSafetyRules bool
}

// Evaluator evaluates documents of a compiled policy set. It is safe for
// concurrent use.
type Evaluator struct {
	compiler *ast.Compiler
	store    storage.Store
	base     fixedData  // the store's data, read once (it is never written after New)
	prepared *lru.Cache // cacheKey(path) → *preparedQuery, nil when statically undefined
	memo     *memo
	builtins map[string]*topdown.Builtin // the cluster built-ins (cluster.go)
	// fastPathOff says why the default policy's fast path is off ("" when on; fastpath.go).
	fastPathOff string
}

// DefaultModules returns the embedded policy sources (tests excluded),
// keyed by file name (base names are unique).
func DefaultModules() map[string]string {
	mods, err := embeddedModules(false)
	if err != nil {
		// The embedded FS is fixed at build time; failing here is a build bug.
		panic(err)
	}
	out := make(map[string]string, len(mods))
	for name, m := range mods {
		out[name] = m.text
	}
	return out
}

// EmbeddedTestModules returns the embedded *_test.rego sources by file name: the
// rules' tests share fixtures across files of package interlink.authz, so a tool
// that runs one rule directory's tests needs them loaded.
func EmbeddedTestModules() map[string]string {
	mods, err := embeddedModules(true)
	if err != nil {
		panic(err) // fixed at build time, as in DefaultModules
	}
	out := map[string]string{}
	for name, m := range mods {
		if isTestFile(name) {
			out[name] = m.text
		}
	}
	return out
}

// embeddedModule is one embedded file: its path in the tree (rego/authz.rego,
// rules/caps/caps.rego) and its text.
type embeddedModule struct {
	path string
	text string
}

// embeddedModules reads the embedded .rego files, with or without tests, by base
// name; two files of one base name are a build bug (an error).
func embeddedModules(withTests bool) (map[string]embeddedModule, error) {
	mods := map[string]embeddedModule{}
	for _, dir := range embeddedDirs {
		err := fs.WalkDir(embedded, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() || !strings.HasSuffix(name, ".rego") || (!withTests && isTestFile(name)) {
				return nil
			}
			if other, dup := mods[name]; dup {
				return fmt.Errorf("embedded policies %s and %s share a base name", other.path, p)
			}
			b, err := embedded.ReadFile(p)
			if err != nil {
				return err
			}
			mods[name] = embeddedModule{path: p, text: string(b)}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading embedded policies: %w", err)
		}
	}
	return mods, nil
}

func isTestFile(name string) bool { return strings.HasSuffix(name, "_test.rego") }

type source struct {
	filename string // shown in parse/compile errors
	text     string
}

// New compiles the embedded modules plus opts.Dir, loads opts.DataFile and
// returns a ready Evaluator.
func New(_ context.Context, opts Options) (*Evaluator, error) {
	snap, err := readSnapshot(opts)
	if err != nil {
		return nil, err
	}
	return snap.build()
}

// snapshot is everything an Evaluator is built from, read once: New and the
// Reloader compile exactly the bytes they fingerprint.
type snapshot struct {
	sources  map[string]source // by base name: embedded defaults overlaid by opts.Dir
	dataFile string            // "" when there is none
	data     []byte
	embedded map[string]embeddedModule // the embedded modules by name, read once per load
	bundles  []Bundle                  // layered over the files (bundles.go), by name
	cluster  ClusterReader             // not part of the fingerprint: fixed for the process
	// allowRelaxing is Options.AllowRelaxingSafetyRules (fixed for the process too).
	allowRelaxing bool
}

// readSnapshot reads the embedded modules, opts.Dir's policies and opts.DataFile.
func readSnapshot(opts Options) (snapshot, error) {
	defaults, err := embeddedModules(false)
	if err != nil {
		return snapshot{}, err
	}
	snap := snapshot{sources: make(map[string]source, len(defaults)), dataFile: opts.DataFile, cluster: opts.Cluster, embedded: defaults, allowRelaxing: opts.AllowRelaxingSafetyRules}
	for name, m := range defaults {
		snap.sources[name] = source{filename: embeddedPrefix + m.path, text: m.text}
	}
	if opts.Dir != "" {
		if err := addDir(snap.sources, defaults, opts.Dir); err != nil {
			return snapshot{}, err
		}
	}
	if opts.DataFile != "" {
		if snap.data, err = os.ReadFile(opts.DataFile); err != nil {
			return snapshot{}, fmt.Errorf("reading data file %s: %w", opts.DataFile, err)
		}
	}
	return snap, nil
}

// build compiles the snapshot's modules and parses its data.
func (s snapshot) build() (*Evaluator, error) {
	compiler, err := compile(s.sources)
	if err != nil {
		return nil, err
	}
	data := map[string]any{}
	if s.dataFile != "" {
		if data, err = parseData(s.dataFile, s.data); err != nil {
			return nil, err
		}
	}
	if data, err = overlayBundleData(data, s.bundles); err != nil {
		return nil, err
	}
	if err := checkEnforcement(data, s.allowRelaxing); err != nil {
		return nil, err
	}
	// Data is converted to Rego values once, here, rather than on every
	// read of every evaluation (issue 19); so are the policy's data-only
	// documents (precompute.go).
	store := inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true))
	if err := precompute(context.Background(), compiler, store); err != nil {
		return nil, err
	}
	fastPathOff, err := gateFastPath(context.Background(), compiler, store)
	if err != nil {
		return nil, err
	}
	base, err := readFixedData(context.Background(), store)
	if err != nil {
		return nil, err
	}
	return &Evaluator{
		compiler:    compiler,
		store:       store,
		base:        base,
		prepared:    lru.New(cacheSize),
		memo:        newMemo(memoSize),
		builtins:    clusterFuncs(s.cluster),
		fastPathOff: fastPathOff,
	}, nil
}

// addDir overlays dir's *.rego files (non-recursive, tests skipped) onto
// sources by base name.
func addDir(sources map[string]source, embedded map[string]embeddedModule, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading policy directory %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".rego") || isTestFile(name) {
			continue
		}
		full := filepath.Join(dir, name)
		b, err := os.ReadFile(full)
		if err != nil {
			return fmt.Errorf("reading policy %s: %w", full, err)
		}
		if err := overlay(sources, embedded, name, source{filename: full, text: string(b)}); err != nil {
			return err
		}
	}
	return nil
}

// overlay puts src into sources under name, a site's file or bundle module: when
// name is an embedded file's (or a legacy name, of several), src replaces it, and
// must declare its package. A site file that happens to share a rule file's name
// (images.rego for its own package interlink.site.images) would otherwise drop
// that rule in silence: it is an error instead, naming both.
func overlay(sources map[string]source, embedded map[string]embeddedModule, name string, src source) error {
	replaced := legacyNames[name]
	if _, ok := embedded[name]; ok {
		replaced = []string{name}
	}
	if len(replaced) > 0 {
		if err := samePackage(embedded[replaced[0]], src); err != nil {
			return err
		}
	}
	for _, r := range replaced {
		delete(sources, r)
	}
	sources[name] = src
	return nil
}

// samePackage checks that src, replacing the embedded module m, declares m's package.
func samePackage(m embeddedModule, src source) error {
	popts := ast.ParserOptions{RegoVersion: ast.RegoV1}
	want, err := ast.ParseModuleWithOpts(m.path, m.text, popts)
	if err != nil {
		return fmt.Errorf("parsing embedded policy %s: %w", m.path, err)
	}
	got, err := ast.ParseModuleWithOpts(src.filename, src.text, popts)
	if err != nil {
		return fmt.Errorf("parsing policy %s: %w", src.filename, err)
	}
	if !got.Package.Path.Equal(want.Package.Path) {
		return fmt.Errorf("policy %s replaces the embedded %s (its base name) but declares %v, not %v: rename it, or declare %v to replace that file", src.filename, m.path, got.Package, want.Package, want.Package)
	}
	return nil
}

func compile(sources map[string]source) (*ast.Compiler, error) {
	names := make([]string, 0, len(sources))
	for name := range sources {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic error order
	modules := make(map[string]*ast.Module, len(sources))
	popts := ast.ParserOptions{RegoVersion: ast.RegoV1}
	for _, name := range names {
		src := sources[name]
		m, err := ast.ParseModuleWithOpts(src.filename, src.text, popts)
		if err != nil {
			return nil, fmt.Errorf("parsing policy %s: %w", src.filename, err)
		}
		modules[src.filename] = m
	}
	c := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithBuiltins(clusterBuiltinDecls)
	if c.Compile(modules); c.Failed() {
		return nil, fmt.Errorf("compiling policies: %w", c.Errors)
	}
	return c, nil
}

// parseData parses a JSON or YAML object read from file. JSON bypasses the
// YAML converter and numbers stay json.Number, so large or fractional values
// survive unchanged.
func parseData(file string, raw []byte) (map[string]any, error) {
	js := raw
	if !json.Valid(raw) {
		var err error
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return nil, fmt.Errorf("parsing data file %s: %w", file, err)
		}
	}
	var v any
	if err := decodeJSON(js, &v); err != nil {
		return nil, fmt.Errorf("decoding data file %s: %w", file, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("data file %s: %w (got %T)", file, errDataNotObject, v)
	}
	return obj, nil
}

var errDataNotObject = errors.New("top level must be an object")

// resultVar receives the document; binding it (rather than querying the ref
// bare) keeps a `false` document defined.
const resultVar = ast.Var("result")

// Generation is 0: an Evaluator's policy and data never change (Reloader's count
// its reloads).
func (e *Evaluator) Generation() uint64 { return 0 }

// Eval evaluates data.<path...> with input, as OPA's Data API does.
// defined is false when the document is undefined.
func (e *Evaluator) Eval(ctx context.Context, path []string, input map[string]any) (any, bool, error) {
	p, err := e.prepare(ctx, path)
	if err != nil || p == nil {
		return nil, false, err
	}
	var value ast.Value
	if input != nil {
		// As rego does: a JSON round trip turns typed slices and structs into
		// what InterfaceToValue reads.
		var raw any = input
		if err := util.RoundTrip(&raw); err != nil {
			return nil, false, fmt.Errorf("converting input: %w", err)
		}
		if value, err = ast.InterfaceToValue(raw); err != nil {
			return nil, false, fmt.Errorf("converting input: %w", err)
		}
	}
	if value, err = e.withSharedProof(ctx, path, value, Memo{}); err != nil {
		return nil, false, err
	}
	v, defined, err := e.evalQuery(ctx, path, p, value)
	if err != nil || !defined {
		return nil, defined, err
	}
	out, err := ast.JSON(v)
	if err != nil {
		return nil, false, fmt.Errorf("evaluating %s: %w", pathString(path), err)
	}
	return out, true, nil
}

// evalQuery evaluates a prepared query with OPA's evaluator and reads its result
// binding; input may be nil (no input). The evaluator is called directly, not
// through rego.PreparedEvalQuery, which builds metrics and a result set per query
// (about 5% of a default decision, issue 19); the options below are the ones it
// would set that a decision needs.
func (e *Evaluator) evalQuery(ctx context.Context, path []string, p *preparedQuery, input ast.Value) (ast.Value, bool, error) {
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("evaluating %s: %w", pathString(path), err)
	}
	defer e.store.Abort(ctx, txn)
	q := topdown.NewQuery(p.body).
		WithCompiler(e.compiler).
		WithStore(e.store).
		WithTransaction(txn).
		WithBaseCache(e.base).
		WithBuiltins(e.builtins).
		WithMetrics(metrics.NoOp()) // nothing reads them; a fresh set costs allocations
	if input != nil {
		q = q.WithInput(ast.NewTerm(input))
	}
	if ctx.Done() != nil {
		cancel := topdown.NewCancel()
		q = q.WithCancel(cancel)
		defer context.AfterFunc(ctx, cancel.Cancel)()
	}
	var result *ast.Term
	err = q.Iter(ctx, func(qr topdown.QueryResult) error {
		result = qr[resultVar]
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("evaluating %s: %w", pathString(path), err)
	}
	if result == nil {
		return nil, false, nil
	}
	return result.Value, true, nil
}

// preparedQuery is a compiled query and what of the input it can read.
type preparedQuery struct {
	body      ast.Body
	footprint footprint
}

// prepare returns the cached or newly compiled query for path; nil (without
// error) means the path is statically undefined.
func (e *Evaluator) prepare(_ context.Context, path []string) (*preparedQuery, error) {
	if len(path) == 0 {
		return nil, errors.New("policy path is empty")
	}
	// Looked up first: a hit (every decision but the first) builds nothing
	// else. Only valid paths are ever cached.
	key := cacheKey(path)
	if p, ok := e.prepared.Get(key); ok {
		return p.(*preparedQuery), nil
	}
	ref := make(ast.Ref, 0, len(path)+1)
	ref = append(ref, ast.DefaultRootDocument)
	for i, seg := range path {
		if seg == "" {
			return nil, fmt.Errorf("policy path segment %d is empty", i)
		}
		// String terms, never parsed text: a segment cannot inject Rego.
		ref = append(ref, ast.StringTerm(seg))
	}
	query := ast.NewBody(ast.Equality.Expr(ast.NewTerm(resultVar), ast.NewTerm(ref)))
	body, err := e.compiler.QueryCompiler().Compile(query)
	if err != nil {
		if staticallyUndefined(err) {
			// Cached as nil: rules and data are fixed for the Evaluator's
			// lifetime, so the path stays undefined.
			if len(key) <= maxCachedPathBytes {
				e.prepared.Add(key, (*preparedQuery)(nil))
			}
			return nil, nil
		}
		return nil, fmt.Errorf("preparing query for %s: %w", pathString(path), err)
	}
	// A concurrent miss may have prepared the same path; either copy works.
	p := &preparedQuery{body: body, footprint: inputFootprint(e.compiler, ref)}
	if len(key) <= maxCachedPathBytes {
		e.prepared.Add(key, p)
	}
	return p, nil
}

// staticallyUndefined reports whether preparation failed only because the
// type checker proved the ref undefined (e.g. a key below a boolean rule).
// The query is nothing but that ref, so any pure type error means exactly
// this; the Data API contract is "undefined", not an error.
func staticallyUndefined(err error) bool {
	var errs ast.Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if e.Code != ast.TypeErr {
			return false
		}
	}
	return true
}

// cacheKey length-prefixes segments so distinct paths never collide.
func cacheKey(path []string) string {
	var b strings.Builder
	n := 0
	for _, s := range path {
		n += len(s) + 4 // a length of up to 3 digits, and ':'
	}
	b.Grow(n)
	for _, s := range path {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}

func pathString(path []string) string {
	return strconv.Quote(strings.Join(path, "/"))
}
