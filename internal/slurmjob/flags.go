package slurmjob

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FlagsAnnotation is the pod annotation whose value the SLURM plugin turns into
// #SBATCH lines.
const FlagsAnnotation = "slurm-job.vk.io/flags"

// Option is one sbatch option of a flags annotation, as sbatch will read it from the
// job script once the plugin has written it.
type Option struct {
	Name     string // long form with its dashes, "--account", whatever the spelling given
	Value    string // the value sbatch gets ("" when HasValue is false)
	HasValue bool
	Flag     string // what the plugin writes after "#SBATCH ", in the spelling given ("-A proj")
}

// FlagsError is why a flags value cannot be pinned down. Its message is meant for the
// pod's owner: it names the word at fault and what to write instead.
type FlagsError struct {
	Word   string // the word at fault, "" when it is about the whole value
	Reason string
}

func (e *FlagsError) Error() string {
	if e.Word == "" {
		return e.Reason
	}
	return fmt.Sprintf("%q: %s", e.Word, e.Reason)
}

func flagsErr(word, format string, args ...any) error {
	return &FlagsError{Word: word, Reason: fmt.Sprintf(format, args...)}
}

// ParseFlags reads a slurm-job.vk.io/flags value the way the SLURM plugin does (a
// shell-style split, options grouped with the words that follow them, a repeated option
// keeping its later value) and then the way sbatch reads the #SBATCH lines the plugin
// writes. It returns the options in the order of those lines, or an error for anything
// where the plugin and sbatch could end up with something else than the options
// returned (a newline, a quote left over, a value-less option that would swallow the
// next line, an abbreviation, one option in two spellings, ...).
//
// What it does not know: the plugin drops --cpus-per-task and --mem when the pod sets
// limits, and writes its own --uid, --cpus-per-task and --mem lines after these, whose
// values then win.
func ParseFlags(value string) ([]Option, error) {
	if err := checkChars(value); err != nil {
		return nil, err
	}
	words, err := splitWords(value)
	if err != nil {
		return nil, err
	}
	groups, err := groupWords(words)
	if err != nil {
		return nil, err
	}
	return resolve(groups)
}

// checkChars refuses what no flags value needs and what could end an #SBATCH line or
// be read differently by the plugin (which splits runes) and sbatch (which reads bytes).
func checkChars(value string) error {
	if !utf8.ValidString(value) {
		return flagsErr("", "the value is not valid UTF-8")
	}
	for i, r := range value {
		switch {
		case r == '\n' || r == '\r':
			return flagsErr("", "the value contains a line break (byte %d): write all options on one line (in YAML, a plain or >- scalar, not |)", i)
		case unicode.IsControl(r):
			return flagsErr("", "the value contains the control character %U (byte %d); separate options with spaces", r, i)
		}
	}
	return nil
}

// splitWords is the plugin's shell-style split: a backslash escapes the next character
// except inside single quotes, quotes group and are dropped, unquoted white space
// separates. Where the plugin carries on (an unclosed quote, a trailing backslash) this
// refuses, and it refuses words sbatch would split or unquote again, since the plugin
// writes them without their quotes.
func splitWords(value string) ([]string, error) {
	var (
		words                   []string
		cur                     strings.Builder
		inSingle, inDouble, esc bool
		started                 bool
	)
	flush := func() {
		if started {
			words = append(words, cur.String())
			cur.Reset()
			started = false
		}
	}
	for _, r := range value {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case r == '\\' && !inSingle:
			esc, started = true, true
		case r == '\'' && !inDouble:
			inSingle, started = !inSingle, true
		case r == '"' && !inSingle:
			inDouble, started = !inDouble, true
		case unicode.IsSpace(r) && !inSingle && !inDouble:
			flush()
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	switch {
	case inSingle:
		return nil, flagsErr("", "a ' quote is never closed")
	case inDouble:
		return nil, flagsErr("", "a \" quote is never closed")
	case esc:
		return nil, flagsErr("", "the value ends with a backslash that escapes nothing")
	}
	flush()
	for _, w := range words {
		if err := checkWord(w); err != nil {
			return nil, err
		}
	}
	return words, nil
}

// checkWord refuses an unquoted word the plugin would write as something sbatch reads
// differently.
func checkWord(w string) error {
	switch {
	case w == "":
		return flagsErr(w, "an empty quoted value is not allowed; leave it out or give a value")
	case strings.IndexFunc(w, unicode.IsSpace) >= 0:
		return flagsErr(w, "contains a space: the plugin drops the quotes, so sbatch would read separate words")
	case strings.ContainsAny(w, `'"\`):
		return flagsErr(w, "contains a quote or backslash once the plugin has removed the outer quoting, which sbatch would read as quoting again")
	case strings.Contains(w, "#"):
		return flagsErr(w, "contains '#', which sbatch reads as the start of a comment")
	}
	return nil
}

// group is one option word with the words the plugin puts on its line.
type group struct {
	opt    string
	values []string
}

// groupWords is the plugin's grouping: each word starting with "-" takes the words up
// to the next one that does. A word before any option is a line of its own to the
// plugin, and sbatch refuses it (or reads "hetjob" as a job separator).
func groupWords(words []string) ([]group, error) {
	var groups []group
	for _, w := range words {
		if strings.HasPrefix(w, "-") {
			groups = append(groups, group{opt: w})
			continue
		}
		if len(groups) == 0 {
			return nil, flagsErr(w, "is not an option: options start with - or --")
		}
		last := &groups[len(groups)-1]
		last.values = append(last.values, w)
	}
	return groups, nil
}

// resolve turns the groups into options, keeping the plugin's order and its "later
// value wins" per key, and refuses one option reaching sbatch in two spellings: the
// plugin keeps both lines, and which comes last then depends on the flavor's options.
func resolve(groups []group) ([]Option, error) {
	var (
		opts  []Option
		index = map[string]int{}    // plugin key → position in opts
		keyOf = map[string]string{} // option name → plugin key that gave it
	)
	for _, g := range groups {
		o, err := interpret(g)
		if err != nil {
			return nil, err
		}
		key := pluginKey(g.opt)
		if other, ok := keyOf[o.Name]; ok && other != key {
			return nil, flagsErr(o.Flag, "gives %s a second time in another spelling (%s before): the plugin keeps both lines, so which one sbatch uses depends on the flavor's options; give it once", o.Name, opts[index[other]].Flag)
		}
		keyOf[o.Name] = key
		if i, ok := index[key]; ok {
			opts[i] = o
			continue
		}
		index[key] = len(opts)
		opts = append(opts, o)
	}
	return opts, nil
}

// pluginKey is the key under which the plugin keeps the later value: the option word
// up to "=", with its own short aliases expanded.
func pluginKey(opt string) string {
	key, _, _ := strings.Cut(opt, "=")
	if long, ok := pluginAliases[key]; ok {
		return long
	}
	return key
}

// interpret reads one group as getopt_long reads its words from an #SBATCH line.
func interpret(g group) (Option, error) {
	o := Option{Flag: strings.Join(append([]string{g.opt}, g.values...), " ")}
	for _, v := range g.values {
		if err := checkSeparateValue(g.opt, v); err != nil {
			return o, err
		}
	}
	if strings.HasPrefix(g.opt, "--") {
		return interpretLong(o, g)
	}
	return interpretShort(o, g)
}

// checkSeparateValue refuses value words sbatch treats specially at the start of a word.
func checkSeparateValue(opt, v string) error {
	switch {
	case strings.EqualFold(v, "hetjob") || strings.EqualFold(v, "packjob"):
		return flagsErr(v, "as a separate word is a job-component separator to sbatch; attach it: %s=%s", opt, v)
	case strings.HasPrefix(v, ":"):
		return flagsErr(v, "a separate word starting with ':' makes sbatch fail; attach it: %s=%s", opt, v)
	}
	return nil
}

func interpretLong(o Option, g group) (Option, error) {
	name, attached, hasAttached := strings.Cut(g.opt[2:], "=")
	if name == "" {
		return o, flagsErr(g.opt, "is not an option: an option name must follow --")
	}
	kind, known := sbatchOptions[name]
	if !known {
		if full := abbreviated(name); len(full) > 0 {
			return o, flagsErr(g.opt, "is an abbreviation sbatch would expand (to %s); write the option's full name", strings.Join(full, " or "))
		}
	}
	o.Name = "--" + name
	return withValue(o, g, kind, attached, hasAttached)
}

func interpretShort(o Option, g group) (Option, error) {
	letter, size := utf8.DecodeRuneInString(g.opt[1:])
	if size == 0 {
		return o, flagsErr(g.opt, "is not an option: a bare - names none")
	}
	if unicode.IsDigit(letter) {
		return o, flagsErr(g.opt, "looks like a negative number, which the plugin reads as an option of its own; attach it to its option (--nice=-5)")
	}
	name, ok := sbatchShort[letter]
	if !ok {
		return o, flagsErr(g.opt, "is not an sbatch option")
	}
	kind := sbatchOptions[name]
	rest := g.opt[1+size:]
	if rest != "" && kind == noArg {
		return o, flagsErr(g.opt, "combines short options; write each on its own (-%c then -%s)", letter, rest)
	}
	o.Name = "--" + name
	// getopt takes whatever follows the letter as its value, "=" included.
	return withValue(o, g, kind, rest, rest != "")
}

// withValue sets the option's value from the attached part or the separate words, as
// getopt_long would for an option of that kind.
func withValue(o Option, g group, kind argKind, attached string, hasAttached bool) (Option, error) {
	switch {
	case len(g.values) > 1:
		return o, flagsErr(o.Flag, "has several values (%s); sbatch takes one: write %s=VALUE", strings.Join(g.values, ", "), o.Name)
	case len(g.values) == 1 && hasAttached:
		return o, flagsErr(o.Flag, "has a value twice; write %s=VALUE", o.Name)
	case kind == noArg && (hasAttached || len(g.values) > 0):
		return o, flagsErr(o.Flag, "%s takes no value", o.Name)
	case kind == optionalArg && len(g.values) > 0:
		return o, flagsErr(o.Flag, "%s takes a value only attached: %s=%s", o.Name, o.Name, g.values[0])
	case (kind == requiredArg || kind == unknownArg) && !hasAttached && len(g.values) == 0:
		return o, flagsErr(o.Flag, "%s", missingValue(o.Name, kind))
	}
	switch {
	case hasAttached:
		o.Value, o.HasValue = attached, true
	case len(g.values) == 1:
		o.Value, o.HasValue = g.values[0], true
	}
	return o, nil
}

func missingValue(name string, kind argKind) string {
	if kind == unknownArg {
		return fmt.Sprintf("%s is not an sbatch option sar-bridge knows, and without a value it cannot tell whether sbatch would take the next #SBATCH line as its value; write %s=VALUE", name, name)
	}
	return fmt.Sprintf("%s needs a value (%s=VALUE): without one sbatch takes the next #SBATCH line's option as its value", name, name)
}

// SBATCHLines is the #SBATCH lines the plugin writes for these options, one per option
// in their order, each ending in a newline.
func SBATCHLines(opts []Option) string {
	var b strings.Builder
	for _, o := range opts {
		b.WriteString("#SBATCH ")
		b.WriteString(o.Flag)
		b.WriteByte('\n')
	}
	return b.String()
}

// FormatFlags is a flags annotation value that gives the same options in their long
// form ("--account=proj --hold"), for a modification that adds or replaces an option.
func FormatFlags(opts []Option) string {
	words := make([]string, len(opts))
	for i, o := range opts {
		words[i] = o.Long()
	}
	return strings.Join(words, " ")
}

// Long is the option in its long form, "--account=proj" or "--hold".
func (o Option) Long() string {
	if !o.HasValue {
		return o.Name
	}
	return o.Name + "=" + o.Value
}
