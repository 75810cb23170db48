// Command test-times sits behind `go test -json` in make test: it prints what a plain
// `go test` run prints (package results, the output of failing tests, build errors),
// records how long each package and top-level test took against its -timeout, and, as
// `test-times summary`, prints the slowest packages and tests of every recorded stage.
//
//	go test -json -timeout 10m ./... | test-times -stage unit -timeout 10m -record DIR
//	test-times summary -record DIR
//
// The summary flags any package over a third of its timeout (the suite's budget, so
// that a slower machine of the same kind still passes); it never fails the run on time:
// the -timeout itself is the hard stop.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// event is a line of test2json's output (go doc test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

// record is one timed package or top-level test, one JSON line in a stage's file.
type record struct {
	Stage   string  `json:"stage"`
	Package string  `json:"package"`
	Test    string  `json:"test,omitempty"`
	Seconds float64 `json:"seconds"`
	Timeout float64 `json:"timeout_seconds"`
	Failed  bool    `json:"failed,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "summary" {
		fs := flag.NewFlagSet("summary", flag.ExitOnError)
		dir := fs.String("record", ".cache/test-times", "the directory the stages recorded into")
		n := fs.Int("n", 10, "how many packages and tests to list")
		_ = fs.Parse(os.Args[2:])
		if err := summary(os.Stdout, *dir, *n); err != nil {
			fmt.Fprintln(os.Stderr, "test-times:", err)
			os.Exit(1)
		}
		return
	}
	stage := flag.String("stage", "", "the stage's name (a file of this name under -record)")
	timeout := flag.Duration("timeout", 10*time.Minute, "the -timeout given to go test")
	dir := flag.String("record", ".cache/test-times", "where to record the stage's times")
	flag.Parse()
	if *stage == "" {
		fmt.Fprintln(os.Stderr, "test-times: -stage is required")
		os.Exit(2)
	}
	recs := filter(os.Stdin, os.Stdout, *stage, timeout.Seconds())
	if err := save(*dir, *stage, recs); err != nil {
		fmt.Fprintln(os.Stderr, "test-times:", err)
		os.Exit(1)
	}
}

// filter copies what a plain go test would print from in to out and returns the times.
func filter(in io.Reader, out io.Writer, stage string, timeout float64) []record {
	var recs []record
	held := map[[2]string][]string{} // output of tests still running, by package and test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // not an event: go test's own messages
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Test == "" && e.Action == "output":
			if e.Output != "PASS\n" { // go test prints a package's PASS only with -v
				fmt.Fprint(out, e.Output)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			recs = append(recs, record{Stage: stage, Package: e.Package, Seconds: e.Elapsed, Timeout: timeout, Failed: e.Action == "fail"})
			// Output of tests the package never finished (a timeout, a crash).
			for k, lines := range held {
				if k[0] == e.Package {
					fmt.Fprint(out, strings.Join(lines, ""))
					delete(held, k)
				}
			}
		case e.Action == "output":
			if !noise(e.Output) {
				held[key] = append(held[key], e.Output)
			}
		case e.Action == "pass" || e.Action == "skip":
			delete(held, key)
			if !strings.Contains(e.Test, "/") {
				recs = append(recs, record{Stage: stage, Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Timeout: timeout})
			}
		case e.Action == "fail":
			fmt.Fprint(out, strings.Join(held[key], ""))
			delete(held, key)
			if !strings.Contains(e.Test, "/") {
				recs = append(recs, record{Stage: stage, Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Timeout: timeout, Failed: true})
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "test-times: reading go test's output:", err)
	}
	return recs
}

// noise is the framing -json adds that a plain go test does not print.
func noise(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

func save(dir, stage string, recs []record) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("recording times: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, stage+".jsonl"))
	if err != nil {
		return fmt.Errorf("recording times: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("recording times: %w", err)
		}
	}
	return f.Close()
}

func load(dir string) ([]record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no times recorded in %s", dir)
	}
	var recs []record
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(f)
		for {
			var r record
			if err := dec.Decode(&r); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			recs = append(recs, r)
		}
		f.Close()
	}
	return recs, nil
}

// summary prints the n slowest packages (with their share of their timeout) and tests.
func summary(out io.Writer, dir string, n int) error {
	recs, err := load(dir)
	if err != nil {
		return err
	}
	var pkgs, tests []record
	for _, r := range recs {
		if r.Test == "" {
			pkgs = append(pkgs, r)
		} else {
			tests = append(tests, r)
		}
	}
	slowest := func(rs []record) []record {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Seconds > rs[j].Seconds })
		return rs[:min(n, len(rs))]
	}
	fmt.Fprintf(out, "test-times: the %d slowest packages (budget: a third of the timeout)\n", n)
	var over []string
	for _, r := range slowest(pkgs) {
		share := 100 * r.Seconds / r.Timeout
		mark := ""
		if 3*r.Seconds > r.Timeout {
			mark = "  OVER BUDGET"
			over = append(over, r.Stage+" "+r.Package)
		}
		fmt.Fprintf(out, "  %8.1fs %3.0f%% of %-4s %-22s %s%s\n", r.Seconds, share, short(r.Timeout), r.Stage, r.Package, mark)
	}
	fmt.Fprintf(out, "test-times: the %d slowest tests\n", n)
	for _, r := range slowest(tests) {
		fmt.Fprintf(out, "  %8.1fs %-22s %s %s\n", r.Seconds, r.Stage, r.Package, r.Test)
	}
	passed, failed := 0, 0
	for _, r := range tests {
		if r.Failed {
			failed++
		} else {
			passed++
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(out, "test-times: over a third of their timeout: %s (a slower machine may time out)\n", strings.Join(over, ", "))
	}
	fmt.Fprintf(out, "test-times: %d passed, %d failed\n", passed, failed)
	return nil
}

func short(seconds float64) string {
	return strings.TrimSuffix(strings.TrimSuffix((time.Duration(seconds)*time.Second).String(), "0s"), "m0")
}
