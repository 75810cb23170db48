// Package replay re-decides recorded decisions with a candidate policy and reports
// what flips: `sar-bridge replay`. It reads decision logs in OPA's event format (the
// console's JSON lines, or what the decision log plugin uploads: gzip'd JSON arrays),
// evaluates each event's recorded input (reviews, quota, namespace and node included,
// as the bridge built it) with the candidate, and compares the answers. No cluster is
// involved: what the bridge read of the cluster is in the input.
package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// Event is a decision log event, as OPA's decision log plugin writes it (the members
// replay reads).
type Event struct {
	DecisionID string                    `json:"decision_id"`
	Path       string                    `json:"path"`
	Input      json.RawMessage           `json:"input"`
	Result     json.RawMessage           `json:"result"`
	Erased     []string                  `json:"erased"`
	Masked     []string                  `json:"masked"`
	Bundles    map[string]bundleRevision `json:"bundles"`
	Labels     map[string]string         `json:"labels"`
	Error      json.RawMessage           `json:"error"`
	Timestamp  string                    `json:"timestamp"`
	// Source is where the event was read: file:line, or file[index] in an array.
	Source string `json:"-"`
}

type bundleRevision struct {
	Revision string `json:"revision"`
}

// Log is what Read found: the events (each decision once) and what was not one.
type Log struct {
	Events []Event
	// Skipped counts lines that are not decision log events (the bridge's own log
	// lines between console events), Duplicates events seen twice (the console and an
	// upload of the same decision).
	Skipped, Duplicates int
}

// maxLine bounds one console line: an event holds a whole pod.
const maxLine = 64 << 20

// ReadPaths reads the events of files and directories (every regular file in them,
// not recursively); "-" is r (standard input).
func ReadPaths(paths []string, stdin io.Reader) (*Log, error) {
	l := &Log{}
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "-" {
			if err := l.read(stdin, "stdin", seen); err != nil {
				return nil, err
			}
			continue
		}
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if err := l.readFile(f, seen); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (l *Log) readFile(name string, seen map[string]bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return l.read(f, name, seen)
}

// read reads one stream: gzip'd or not, a JSON array of events (an upload), or lines
// of which those holding a JSON object are events (the console, amid log lines).
func (l *Log) read(r io.Reader, name string, seen map[string]bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		// An upload's body is one gzip'd array; a file of several uploads holds their
		// gzip members one after the other, which gzip.Reader reads as one stream.
		br = bufio.NewReaderSize(zr, 64<<10)
	}
	first, err := firstByte(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	if first == '[' {
		return l.readArrays(br, name, seen)
	}
	return l.readLines(br, name, seen)
}

func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			return b, br.UnreadByte()
		}
	}
}

// readArrays reads one or more JSON arrays of events (uploads, one after the other).
func (l *Log) readArrays(r io.Reader, name string, seen map[string]bool) error {
	dec := json.NewDecoder(r)
	for n := 0; ; n++ {
		var batch []json.RawMessage
		err := dec.Decode(&batch)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: array %d: %w", name, n+1, err)
		}
		for i, raw := range batch {
			src := fmt.Sprintf("%s[%d]", name, i)
			if n > 0 {
				src = fmt.Sprintf("%s#%d[%d]", name, n+1, i)
			}
			if err := l.add(raw, src, seen); err != nil {
				return err
			}
		}
	}
}

// readLines reads JSON lines; lines that are not JSON objects (the bridge's logfmt log
// lines, between its console events) are counted and skipped.
func (l *Log) readLines(r *bufio.Reader, name string, seen map[string]bool) error {
	for n := 1; ; n++ {
		line, err := readLine(r)
		if len(line) > 0 {
			trimmed := bytes.TrimSpace(line)
			switch {
			case len(trimmed) == 0:
			case trimmed[0] != '{':
				l.Skipped++
			default:
				if aerr := l.add(trimmed, fmt.Sprintf("%s:%d", name, n), seen); aerr != nil {
					return aerr
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		if err != nil || !isPrefix {
			return line, err
		}
	}
}

// add keeps raw when it is a decision log event (it has a decision_id); a JSON
// object that is not one (a JSON log line of the bridge) is skipped.
func (l *Log) add(raw []byte, src string, seen map[string]bool) error {
	var e Event
	if err := json.Unmarshal(raw, &e); err != nil {
		var probe map[string]json.RawMessage
		if json.Unmarshal(raw, &probe) != nil {
			l.Skipped++ // a log line that starts with '{' but is not JSON
			return nil
		}
		return fmt.Errorf("%s: not a decision log event: %w", src, err)
	}
	if e.DecisionID == "" {
		l.Skipped++
		return nil
	}
	if seen[e.DecisionID] {
		l.Duplicates++
		return nil
	}
	seen[e.DecisionID] = true
	e.Source = src
	l.Events = append(l.Events, e)
	return nil
}
