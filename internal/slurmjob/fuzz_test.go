package slurmjob

import (
	"strings"
	"testing"
	"unicode"
)

// FuzzParse: ParseFlags never panics, returns nothing that could end an #SBATCH line,
// round-trips through FormatFlags, and agrees with the reference model of the plugin
// and sbatch whenever it accepts.
func FuzzParse(f *testing.F) {
	for _, e := range readGolden(f) {
		f.Add(e.Input)
	}
	f.Fuzz(func(t *testing.T, in string) {
		opts, err := ParseFlags(in)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.IndexFunc(msg, unicode.IsControl) >= 0 {
				t.Fatalf("ParseFlags(%q): unfit message %q", in, msg)
			}
			return
		}
		for _, o := range opts {
			for _, s := range []string{o.Name, o.Value, o.Flag} {
				if strings.IndexFunc(s, unicode.IsControl) >= 0 {
					t.Fatalf("ParseFlags(%q): %q holds a control character", in, s)
				}
			}
			if !strings.HasPrefix(o.Name, "--") || (!o.HasValue && o.Value != "") {
				t.Fatalf("ParseFlags(%q): malformed %+v", in, o)
			}
		}
		if strings.Count(SBATCHLines(opts), "\n") != len(opts) {
			t.Fatalf("ParseFlags(%q): %d options, lines %q", in, len(opts), SBATCHLines(opts))
		}
		if err := checkRoundTrip(opts); err != nil {
			t.Fatalf("ParseFlags(%q): %v", in, err)
		}
		if err := checkAgainstReference(in, opts); err != nil {
			t.Fatalf("ParseFlags(%q): %v", in, err)
		}
	})
}

// FuzzContainerArgs: the container-option parsers never panic and return only absolute
// sources free of "..", made of characters the shell reads as themselves.
func FuzzContainerArgs(f *testing.F) {
	for _, s := range []string{"--bind /a:/b,/c", "-B/x --nv", "--mount type=bind,src=/d,dst=/e", "--home /h:/home", "-m /a:/b:none:bind", "--conf /etc/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, parse := range []func(string) (ContainerArgs, error){ParseSingularityArgs, ParseEnrootArgs} {
			args, err := parse(in)
			if err != nil {
				continue
			}
			for _, src := range args.Sources {
				if !UnderPrefix(src, "/") || strings.IndexFunc(src, func(r rune) bool { return !plainShellChar(r) || r == ' ' }) >= 0 {
					t.Fatalf("parse(%q): source %q", in, src)
				}
			}
		}
	})
}
