package mapping

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/internal/hotreload"
)

// DefaultReloadInterval is how often a Source checks its file when NewSource is given
// no interval.
const DefaultReloadInterval = hotreload.DefaultInterval

// ParseFile reads a mappings file, as given to --openshift.mappings-file.
//
// The format is the one of --openshift.mappings, one pair per line:
//
//	# tenant=group; "*" is the fallback for every tenant without its own line
//	team-a=team-a.interlink.io
//	team-b = team-b.interlink.io   # spaces around "=" and trailing comments are fine
//	*=interlink.io
//
// Blank lines are ignored, and so is everything from a "#" to the end of its line
// (neither a tenant, that is a namespace name or a label value, nor an API group can
// contain "#"). A tenant may appear more than once only with the same group. Every
// group must be a valid API group (a DNS subdomain). A file without any pair is valid
// and maps nothing.
func ParseFile(path string) (Mappings, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Mappings{}, fmt.Errorf("reading mappings file: %w", err)
	}
	return parseFile(path, raw)
}

func parseFile(path string, raw []byte) (Mappings, error) {
	groups := map[string]string{}
	lineOf := map[string]int{}
	for i, line := range strings.Split(string(raw), "\n") {
		n := i + 1
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		tenant, group, err := parsePair(line)
		if err != nil {
			return Mappings{}, fmt.Errorf("mappings file %s:%d: %w", path, n, err)
		}
		if prev, dup := groups[tenant]; dup && prev != group {
			return Mappings{}, fmt.Errorf("mappings file %s:%d: tenant %q is already mapped to %q on line %d", path, n, tenant, prev, lineOf[tenant])
		}
		groups[tenant], lineOf[tenant] = group, n
	}
	return Mappings{groups: groups}, nil
}

// Merge combines the mappings of the flags and of the file. A tenant both map is an
// error unless they agree on its group.
func Merge(flags, file Mappings) (Mappings, error) {
	groups := make(map[string]string, len(flags.groups)+len(file.groups))
	for t, g := range flags.groups {
		groups[t] = g
	}
	for t, g := range file.groups {
		if prev, dup := groups[t]; dup && prev != g {
			return Mappings{}, fmt.Errorf("tenant %q is mapped to %q by --openshift.mappings and to %q by the mappings file", t, prev, g)
		}
		groups[t] = g
	}
	return Mappings{groups: groups}, nil
}

// Source holds the current mappings: those of the flags merged with those of a file it
// rereads when the file changes. It is safe for concurrent use.
//
// Every interval the file is read and hashed, so in-place edits, renames over the file
// and a ConfigMap's symlink swap are all seen. A file that cannot be read or parsed, or
// that conflicts with the flags, is rejected: logged once, counted in
// sar_bridge_mapping_reloads_total{result="failure"}, and the last good mappings keep
// serving.
type Source struct {
	v *hotreload.Value[Mappings]
}

// NewSource merges flagMappings with the mappings of file (when not empty) and
// rereads the file every interval (DefaultReloadInterval when not positive) until ctx
// is done. An error of the first read is returned: start-up fails. logger and reg may
// be nil; reg registers sar_bridge_mapping_reloads_total and
// sar_bridge_mapping_last_reload_success.
func NewSource(ctx context.Context, flagMappings Mappings, file string, interval time.Duration, logger log.Logger, reg prometheus.Registerer) (*Source, error) {
	load := func(Mappings) (hotreload.Snapshot[Mappings], error) {
		if file == "" {
			return hotreload.Snapshot[Mappings]{Build: func(context.Context) (Mappings, error) { return flagMappings, nil }}, nil
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			return hotreload.Snapshot[Mappings]{}, fmt.Errorf("reading mappings file: %w", err)
		}
		return hotreload.Snapshot[Mappings]{
			Fingerprint: sha256.Sum256(raw),
			Build:       func(context.Context) (Mappings, error) { return merge(flagMappings, file, raw) },
		}, nil
	}
	var logKeyvals []any
	if file != "" {
		logKeyvals = []any{"file", file}
	}
	v, err := hotreload.New(ctx, hotreload.Options[Mappings]{
		Name:            "mapping",
		ReloadsHelp:     "Tenant mapping reloads after a change of the mappings file, by result (success, failure).",
		LastSuccessHelp: "1 when the mappings file last seen was loaded, 0 when it was rejected and older mappings are serving.",
		Interval:        interval,
		Logger:          logger,
		Component:       "mappings-reloader",
		LogKeyvals:      logKeyvals,
		Reloaded:        "mappings reloaded",
		Rejected:        "mappings reload rejected; the last good mappings keep serving",
		Restored:        "mappings file is back to the serving version",
		Describe:        func(m Mappings) []any { return []any{"mappings", m.String()} },
		Registerer:      reg,
		Static:          file == "",
	}, load)
	if err != nil {
		return nil, err
	}
	return &Source{v: v}, nil
}

// Current returns the mappings in force.
func (s *Source) Current() Mappings { return s.v.Current() }

// Group returns the API group of a tenant under the current mappings; see
// Mappings.Group.
func (s *Source) Group(tenant string) (string, bool) { return s.Current().Group(tenant) }

// Named returns the API group the current mappings name for the tenant itself; see
// Mappings.Named.
func (s *Source) Named(tenant string) (string, bool) { return s.Current().Named(tenant) }

// Generation counts the successful reloads since NewSource.
func (s *Source) Generation() uint64 { return s.v.Generation() }

// merge parses the content raw of the mappings file and merges it with the flags.
func merge(flags Mappings, file string, raw []byte) (Mappings, error) {
	fromFile, err := parseFile(file, raw)
	if err != nil {
		return Mappings{}, err
	}
	merged, err := Merge(flags, fromFile)
	if err != nil {
		return Mappings{}, fmt.Errorf("mappings file %s: %w", file, err)
	}
	return merged, nil
}
