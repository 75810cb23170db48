package slurmjob

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func opt(name, value, flag string) Option {
	return Option{Name: name, Value: value, HasValue: true, Flag: flag}
}

func flagOpt(name, flag string) Option { return Option{Name: name, Flag: flag} }

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Option
		wantErr string // part of the message, "" when the parse succeeds
	}{
		// What users write.
		{in: "", want: nil},
		{in: "--time=1-00:00:00", want: []Option{opt("--time", "1-00:00:00", "--time=1-00:00:00")}},
		{in: "--gres=gpu:a100:2", want: []Option{opt("--gres", "gpu:a100:2", "--gres=gpu:a100:2")}},
		{in: "-N 2", want: []Option{opt("--nodes", "2", "-N 2")}},
		{in: "-Aproj", want: []Option{opt("--account", "proj", "-Aproj")}},
		{in: "-A=proj", want: []Option{opt("--account", "=proj", "-A=proj")}}, // getopt keeps the "="
		{in: "-q low", want: []Option{opt("--qos", "low", "-q low")}},         // not a plugin alias, still --qos to sbatch
		{in: "-p gpu --partition=cpu", want: []Option{opt("--partition", "cpu", "--partition=cpu")}},
		{in: "--account proj --account=other", want: []Option{opt("--account", "other", "--account=other")}},
		{in: "-n 8 --ntasks=4", want: []Option{opt("--ntasks", "4", "--ntasks=4")}},
		{in: "--mail-user=a@b.org --mail-type=END,FAIL", want: []Option{
			opt("--mail-user", "a@b.org", "--mail-user=a@b.org"), opt("--mail-type", "END,FAIL", "--mail-type=END,FAIL")}},
		{in: `--constraint="a|b"`, want: []Option{opt("--constraint", "a|b", "--constraint=a|b")}},
		{in: `'--partition' 'gpu'`, want: []Option{opt("--partition", "gpu", "--partition gpu")}},
		{in: "--partition=''", want: []Option{opt("--partition", "", "--partition=")}},
		{in: "-A proj -p gpu -t 2:00:00 -c 8", want: []Option{
			opt("--account", "proj", "-A proj"), opt("--partition", "gpu", "-p gpu"),
			opt("--time", "2:00:00", "-t 2:00:00"), opt("--cpus-per-task", "8", "-c 8")}},
		{in: "-w node[01-04] -o /scratch/%x-%j.out", want: []Option{
			opt("--nodelist", "node[01-04]", "-w node[01-04]"), opt("--output", "/scratch/%x-%j.out", "-o /scratch/%x-%j.out")}},
		{in: "--exclusive -H", want: []Option{flagOpt("--exclusive", "--exclusive"), flagOpt("--hold", "-H")}},
		{in: "--hold -H", wantErr: "gives --hold a second time"}, // -H is no alias to the plugin
		{in: "--exclusive=user --nice=-5 -kfoo", want: []Option{
			opt("--exclusive", "user", "--exclusive=user"), opt("--nice", "-5", "--nice=-5"), opt("--no-kill", "foo", "-kfoo")}},
		{in: "--uid=0 --gid 0", want: []Option{opt("--uid", "0", "--uid=0"), opt("--gid", "0", "--gid 0")}},
		{in: "--site-option=x --site-flag y", want: []Option{
			opt("--site-option", "x", "--site-option=x"), opt("--site-flag", "y", "--site-flag y")}},
		{in: "  --time=1\u00a0--mem=1G  ", want: []Option{opt("--time", "1", "--time=1"), opt("--mem", "1G", "--mem=1G")}},
		{in: "--comment=$(id)", want: []Option{opt("--comment", "$(id)", "--comment=$(id)")}}, // an #SBATCH line is no shell

		// What the plugin and sbatch could read otherwise.
		{in: "--time=1:00\n--mem=1G", wantErr: "line break (byte 11)"},
		{in: "--comment=\"a\nrm -rf ~\"", wantErr: "line break"},
		{in: "--time=1:00 \\\r\n--mem=1G", wantErr: "line break"},
		{in: "--time=1\x00", wantErr: "control character U+0000"},
		{in: "\t--time=1", wantErr: "control character U+0009"},
		{in: "--time=1\x85", wantErr: "not valid UTF-8"},
		{in: "--comment=\u0085", wantErr: "control character U+0085"},
		{in: "'--time=1", wantErr: "' quote is never closed"},
		{in: `--comment="x`, wantErr: `" quote is never closed`},
		{in: `--time=1\`, wantErr: "backslash that escapes nothing"},
		{in: `--comment "a b"`, wantErr: `"a b": contains a space`},
		{in: `--job-name=my\ job`, wantErr: "contains a space"},
		{in: `--comment="it's"`, wantErr: "quote or backslash"},
		{in: `--comment='a\b'`, wantErr: "quote or backslash"},
		{in: "--comment=a#b", wantErr: "'#'"},
		{in: "--partition ''", wantErr: "empty quoted value"},
		{in: "proj --account=x", wantErr: `"proj": is not an option`},
		{in: "--", wantErr: "an option name must follow --"},
		{in: "-p gpu -- -A x", wantErr: "an option name must follow --"},
		{in: "-", wantErr: "a bare -"},
		{in: "--nice -5", wantErr: "negative number"},
		{in: "-Z", wantErr: `"-Z": is not an sbatch option`},
		{in: "-HAproj", wantErr: "combines short options; write each on its own (-H then -Aproj)"},
		{in: "--acco=proj", wantErr: "abbreviation sbatch would expand (to --account)"},
		{in: "--acc=proj", wantErr: "(to --account or --acctg-freq)"},
		{in: "--account", wantErr: "--account needs a value (--account=VALUE)"},
		{in: "-A", wantErr: "--account needs a value"},
		{in: "--account --partition=gpu", wantErr: "--account needs a value"},
		{in: "--site-flag", wantErr: "not an sbatch option sar-bridge knows"},
		{in: "--comment a b", wantErr: "several values (a, b)"},
		{in: "--account=a b", wantErr: "has a value twice"},
		{in: "-Aa b", wantErr: "has a value twice"},
		{in: "--hold=1", wantErr: "--hold takes no value"},
		{in: "--hold yes", wantErr: "--hold takes no value"},
		{in: "--exclusive user", wantErr: "only attached: --exclusive=user"},
		{in: "--comment hetjob", wantErr: "job-component separator"},
		{in: "--comment HetJob", wantErr: "job-component separator"},
		{in: "--comment :x", wantErr: "starting with ':'"},
		{in: "-Aa -Ab", wantErr: "gives --account a second time in another spelling (-Aa before)"},
		{in: "--account=a -Ab --account=c", wantErr: "another spelling"},
		{in: "--qos=high -q low", wantErr: "another spelling"},
		{in: "-c4 --cpus-per-task=8", wantErr: "another spelling"},
	} {
		got, err := ParseFlags(tc.in)
		if tc.wantErr != "" {
			var fe *FlagsError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &fe) {
				t.Errorf("ParseFlags(%q) = %v, %v; want a *FlagsError containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFlags(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if err == nil {
			if d := checkAgainstReference(tc.in, got); d != nil {
				t.Errorf("ParseFlags(%q): %v", tc.in, d)
			}
		}
	}
}

// goldenEntry is one input of testdata/plugin_golden.json with what the SLURM plugin's
// own functions (f8451d9: splitSlurmFlags, slurmFlagKey, deduplicateSlurmFlags, run by
// hand on this file, as the plugin module is neither on the Go module proxy nor
// exporting them) gave for it.
type goldenEntry struct {
	Input       string   `json:"input"`
	PluginFlags []string `json:"plugin_flags"`
	PluginKeys  []string `json:"plugin_keys"`
	PluginLines []string `json:"plugin_lines"`
}

func readGolden(t testing.TB) []goldenEntry {
	raw, err := os.ReadFile("testdata/plugin_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []goldenEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestReferenceMatchesPlugin holds the reference model's plugin half to what the real
// plugin code gave, and ParseFlags to the whole model, on the corpus.
func TestReferenceMatchesPlugin(t *testing.T) {
	entries := readGolden(t)
	accepted := 0
	for _, e := range entries {
		flags := refPluginSplit(e.Input)
		keys := make([]string, 0, len(flags))
		for _, f := range flags {
			keys = append(keys, refPluginKey(f))
		}
		if flags == nil {
			flags = []string{}
		}
		if !reflect.DeepEqual(flags, e.PluginFlags) || !reflect.DeepEqual(keys, e.PluginKeys) {
			t.Errorf("%q: model splits %q keys %q, the plugin %q keys %q", e.Input, flags, keys, e.PluginFlags, e.PluginKeys)
		}
		if lines := refPluginLines(e.Input); !reflect.DeepEqual(lines, e.PluginLines) {
			t.Errorf("%q: model writes %q, the plugin %q", e.Input, lines, e.PluginLines)
		}
		opts, err := ParseFlags(e.Input)
		if err != nil {
			continue
		}
		accepted++
		if d := checkAgainstReference(e.Input, opts); d != nil {
			t.Errorf("%q: %v", e.Input, d)
		}
	}
	if accepted < len(entries)/2 {
		t.Errorf("only %d of %d corpus entries parse: the corpus should be mostly real-world flags", accepted, len(entries))
	}
}

func TestSBATCHLines(t *testing.T) {
	opts, err := ParseFlags("-A proj --time=1:00:00 -p gpu --exclusive -p cpu")
	if err != nil {
		t.Fatal(err)
	}
	want := "#SBATCH -A proj\n#SBATCH --time=1:00:00\n#SBATCH -p cpu\n#SBATCH --exclusive\n"
	if got := SBATCHLines(opts); got != want {
		t.Errorf("SBATCHLines = %q, want %q", got, want)
	}
	if got, want := FormatFlags(opts), "--account=proj --time=1:00:00 --partition=cpu --exclusive"; got != want {
		t.Errorf("FormatFlags = %q, want %q", got, want)
	}
}

func TestFormatFlagsRoundTrip(t *testing.T) {
	for _, e := range readGolden(t) {
		opts, err := ParseFlags(e.Input)
		if err != nil {
			continue
		}
		if err := checkRoundTrip(opts); err != nil {
			t.Errorf("%q: %v", e.Input, err)
		}
	}
}

// checkRoundTrip: the long form of parsed options parses to the same options.
func checkRoundTrip(opts []Option) error {
	again, err := ParseFlags(FormatFlags(opts))
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(withoutFlags(again), withoutFlags(opts)) {
		return errors.New("FormatFlags then ParseFlags gives " + FormatFlags(again))
	}
	return nil
}

func withoutFlags(opts []Option) []Option {
	out := make([]Option, len(opts))
	for i, o := range opts {
		o.Flag = ""
		out[i] = o
	}
	return out
}
