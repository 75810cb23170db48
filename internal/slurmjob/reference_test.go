package slurmjob

// A reference model, for differential tests, of what happens to a flags annotation:
// the SLURM plugin's split, grouping, keys and "later value wins" (interlink-slurm-plugin
// f8451d9, pkg/slurm/prepare.go: splitShellWords, splitSlurmFlags, slurmFlagKey,
// deduplicateSlurmFlags), then sbatch reading the #SBATCH lines (SchedMD/slurm 284c3b9,
// src/sbatch/opt.c: get_argument, _opt_batch_script; getopt_long with "+").
// It is written plainly, step for step, unlike ParseFlags, and it refuses nothing the
// plugin and sbatch accept; testdata/plugin_golden.json holds what the real plugin
// functions gave on the corpus, which the plugin half must reproduce.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// refPluginSplit is the plugin's split into flags: words, then each word starting with
// "-" joined with the words after it up to the next such word.
func refPluginSplit(input string) []string {
	words := refShellWords(input)
	var flags []string
	for i := 0; i < len(words); i++ {
		w := strings.TrimSpace(words[i])
		if w == "" {
			continue
		}
		if !strings.HasPrefix(w, "-") {
			flags = append(flags, w)
			continue
		}
		parts := []string{w}
		for i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
			parts = append(parts, words[i+1])
			i++
		}
		flags = append(flags, strings.Join(parts, " "))
	}
	return flags
}

// refShellWords is the plugin's word split, which never fails: an unclosed quote runs
// to the end, a trailing backslash stays.
func refShellWords(input string) []string {
	var words []string
	var cur []rune
	var single, double, esc, started bool
	for _, r := range input {
		if esc {
			cur, esc, started = append(cur, r), false, true
			continue
		}
		switch {
		case r == '\\' && !single:
			esc, started = true, true
		case r == '\'' && !double:
			single, started = !single, true
		case r == '"' && !single:
			double, started = !double, true
		case unicode.IsSpace(r) && !single && !double:
			if started {
				words = append(words, string(cur))
			}
			cur, started = nil, false
		default:
			cur, started = append(cur, r), true
		}
	}
	if esc {
		cur = append(cur, '\\')
	}
	if started {
		words = append(words, string(cur))
	}
	return words
}

// refPluginKey is the plugin's key of a flag: its first word (split again) up to "=",
// short aliases expanded.
func refPluginKey(flag string) string {
	words := refShellWords(strings.TrimSpace(flag))
	if len(words) == 0 {
		return ""
	}
	key := words[0]
	if i := strings.Index(key, "="); i >= 0 {
		key = key[:i]
	}
	if long, ok := pluginAliases[key]; ok {
		return long
	}
	return key
}

// refPluginLines is the #SBATCH lines the plugin writes for the annotation alone: per
// key the last flag, at the place of the key's first flag.
func refPluginLines(input string) []string {
	var keys []string
	last := map[string]string{}
	for _, f := range refPluginSplit(input) {
		f = strings.TrimSpace(f)
		key := refPluginKey(f)
		if f == "" || key == "" {
			continue
		}
		if _, seen := last[key]; !seen {
			keys = append(keys, key)
		}
		last[key] = f
	}
	lines := []string{}
	for _, k := range keys {
		lines = append(lines, "#SBATCH "+last[k])
	}
	return lines
}

var errSbatchRefuses = errors.New("sbatch refuses the script")

// refSbatchArgv is the words sbatch takes from #SBATCH lines, as get_argument reads
// them: C white space separates, quotes group, a backslash escapes, an unquoted "#"
// ends the line, "hetjob" ends it too (a job-component separator), a word starting
// with ":" or an unmatched quote is fatal.
func refSbatchArgv(lines []string) ([]string, error) {
	var argv []string
	for _, line := range lines {
		rest, ok := strings.CutPrefix(line, "#SBATCH")
		if !ok {
			return nil, fmt.Errorf("not an #SBATCH line: %q", line)
		}
		if strings.Contains(rest, "\n") {
			return nil, fmt.Errorf("%w: a line break ends the #SBATCH line and starts shell text", errSbatchRefuses)
		}
		for first := true; ; first = false {
			rest = strings.TrimLeft(rest, " \t\v\f\r")
			if w := strings.ToLower(firstCField(rest)); w == "hetjob" || w == "packjob" {
				if first {
					return nil, fmt.Errorf("%w: a job-component separator", errSbatchRefuses)
				}
				break
			}
			if strings.HasPrefix(rest, ":") {
				return nil, fmt.Errorf("%w: a word starting with ':'", errSbatchRefuses)
			}
			arg, n, err := refSbatchArgument(rest)
			if err != nil {
				return nil, err
			}
			if arg == nil {
				break
			}
			argv = append(argv, *arg)
			rest = rest[n:]
		}
	}
	return argv, nil
}

func firstCField(s string) string {
	if i := strings.IndexAny(s, " \t\v\f\r"); i >= 0 {
		return s[:i]
	}
	return s
}

// refSbatchArgument reads one word at the start of s; nil when there is none.
func refSbatchArgument(s string) (*string, int, error) {
	var out []byte
	var quote byte
	i := 0
	for i < len(s) && (quote != 0 || !strings.ContainsRune(" \t\v\f\r", rune(s[i]))) {
		c := s[i]
		switch {
		case c == '\\':
			i++
			switch {
			case i < len(s) && s[i] == ' ':
				out = append(out, ' ')
				i++
			case i < len(s) && (quote != 0 || !strings.ContainsRune("\t\v\f\r", rune(s[i]))):
				out = append(out, s[i]) // copied whatever it is
				i++
			}
			continue
		case quote != 0 && c == quote:
			quote = 0
			i++
			continue
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
			i++
			continue
		case quote == 0 && c == '#':
			return refArg(out), len(s), nil
		}
		out = append(out, c)
		i++
	}
	if quote != 0 {
		return nil, 0, fmt.Errorf("%w: unmatched %c", errSbatchRefuses, quote)
	}
	return refArg(out), i, nil
}

func refArg(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// refSetting is one option getopt_long hands sbatch.
type refSetting struct {
	name, value string
	hasValue    bool
	end         int // index of the last argv word it used
}

// refGetopt reads argv as getopt_long with "+" does for sbatch's table. An option sbatch
// does not know is taken as a SPANK option that requires a value: the reading where it
// swallows the next word, the only one that does not end in an error.
func refGetopt(argv []string) ([]refSetting, error) {
	var out []refSetting
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			return nil, fmt.Errorf("%w: invalid directive %q", errSbatchRefuses, a)
		}
		var err error
		if strings.HasPrefix(a, "--") {
			out, i, err = refLong(out, argv, i)
		} else {
			out, i, err = refShort(out, argv, i)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func refLong(out []refSetting, argv []string, i int) ([]refSetting, int, error) {
	name, val, has := strings.Cut(argv[i][2:], "=")
	kind, ok := sbatchOptions[name]
	if !ok {
		switch full := abbreviated(name); len(full) {
		case 0:
			kind = requiredArg
		case 1:
			name = strings.TrimPrefix(full[0], "--")
			kind = sbatchOptions[name]
		default:
			return nil, i, fmt.Errorf("%w: ambiguous --%s", errSbatchRefuses, name)
		}
	}
	return refTake(out, argv, i, name, kind, val, has)
}

func refShort(out []refSetting, argv []string, i int) ([]refSetting, int, error) {
	word := []rune(argv[i])
	for j := 1; j < len(word); j++ {
		name, ok := sbatchShort[word[j]]
		if !ok {
			return nil, i, fmt.Errorf("%w: unknown -%c", errSbatchRefuses, word[j])
		}
		kind := sbatchOptions[name]
		if kind == noArg {
			out = append(out, refSetting{name: name, end: i})
			continue
		}
		rest := string(word[j+1:])
		return refTake(out, argv, i, name, kind, rest, rest != "")
	}
	return out, i, nil
}

// refTake records one option with its value, taking the next word for a required one.
func refTake(out []refSetting, argv []string, i int, name string, kind argKind, val string, has bool) ([]refSetting, int, error) {
	switch {
	case kind == noArg && has:
		return nil, i, fmt.Errorf("%w: --%s takes no value", errSbatchRefuses, name)
	case kind == requiredArg && !has:
		if i+1 == len(argv) {
			return nil, i, fmt.Errorf("%w: --%s needs a value", errSbatchRefuses, name)
		}
		i++
		val, has = argv[i], true
	}
	return append(out, refSetting{name: name, value: val, hasValue: has, end: i}), i, nil
}

// refSentinel is a line the plugin writes after the annotation's (its own --uid=…
// and the like): it must reach sbatch as an option of its own.
const refSentinel = "#SBATCH --spread-job"

// refEffective is what sbatch ends up with for the annotation: per option its last
// value, in the order options first appear, or an error when sbatch refuses the
// script or the plugin's next line would not be an option of its own.
func refEffective(input string) ([]refSetting, error) {
	lines := append(refPluginLines(input), refSentinel)
	argv, err := refSbatchArgv(lines)
	if err != nil {
		return nil, err
	}
	settings, err := refGetopt(argv)
	if err != nil {
		return nil, err
	}
	if len(settings) == 0 || settings[len(settings)-1].end != len(argv)-1 || settings[len(settings)-1].name != "spread-job" {
		return nil, fmt.Errorf("the plugin's next line is swallowed")
	}
	settings = settings[:len(settings)-1]
	var eff []refSetting
	for _, s := range settings {
		if i := slices.IndexFunc(eff, func(e refSetting) bool { return e.name == s.name }); i >= 0 {
			eff[i] = s
			continue
		}
		eff = append(eff, s)
	}
	return eff, nil
}

// checkAgainstReference fails when ParseFlags accepted input but the plugin and sbatch,
// as modelled, would not give exactly those options from exactly those lines.
func checkAgainstReference(input string, opts []Option) error {
	wantLines := strings.Join(refPluginLines(input), "\n")
	if wantLines != "" {
		wantLines += "\n"
	}
	if got := SBATCHLines(opts); got != wantLines {
		return fmt.Errorf("lines %q, the plugin writes %q", got, wantLines)
	}
	eff, err := refEffective(input)
	if err != nil {
		return fmt.Errorf("parsed as %v, but %w", opts, err)
	}
	got := map[string]Option{}
	for _, o := range opts {
		got[o.Name] = o
	}
	if len(got) != len(eff) {
		return fmt.Errorf("parsed as %v, sbatch gets %v", opts, eff)
	}
	for _, e := range eff {
		o, ok := got["--"+e.name]
		if !ok || o.Value != e.value || o.HasValue != e.hasValue {
			return fmt.Errorf("parsed as %v, sbatch gets %+v", opts, eff)
		}
	}
	return nil
}
