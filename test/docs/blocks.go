// Package docs reads the project's Markdown (README.md and docs/): its fenced blocks,
// which the e2e docs test runs or applies, its relative links, and the flags reference
// generated from the binary's --help.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	File string // path relative to the repository root
	Line int    // line of the opening fence, from 1
	Lang string // the info string's first word: sh, console, yaml, json, rego, text, go
	// Attrs are the info string's key=value words; file=NAME writes the block to NAME
	// (relative to the directory commands run in) for later blocks of the page.
	Attrs map[string]string
	// Skip is the reason of a `<!-- docs-test: skip: REASON -->` marker on the line
	// just before the block; "" when unmarked.
	Skip string
	Text string // the content, indentation of the fence removed, ending in a newline
}

// Where names the block for messages: file:line.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var (
	fenceRE  = regexp.MustCompile("^( *)(```+)(.*)$")
	markerRE = regexp.MustCompile(`^\s*<!-- docs-test: skip: (.+?) -->\s*$`)
	// anyMarkerRE catches a misspelt marker, which would otherwise leave a block unmarked
	// without saying so.
	anyMarkerRE = regexp.MustCompile(`^\s*<!--\s*docs-test`)
)

// Parse returns the fenced blocks of one Markdown file. An indented code block (four
// spaces outside a fence and outside a list) or a malformed marker is an error: every
// block must be fenced with a language so that the docs test can classify it.
func Parse(file string, md []byte) ([]Block, error) {
	var (
		blocks  []Block
		cur     *Block
		indent  string
		fence   string
		prev    string
		body    strings.Builder
		inList  bool
		lineNum int
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		if cur != nil {
			if strings.TrimSpace(line) == fence {
				cur.Text = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				prev = line
				continue
			}
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
			continue
		}
		// CommonMark: a backtick fence's info string holds no backtick (a line that
		// starts with an inline code span is prose).
		if m := fenceRE.FindStringSubmatch(line); m != nil && !strings.Contains(m[3], "`") {
			info := strings.Fields(m[3])
			b := Block{File: file, Line: lineNum, Attrs: map[string]string{}}
			if len(info) > 0 {
				b.Lang = info[0]
				for _, kv := range info[1:] {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || v == "" {
						return nil, fmt.Errorf("%s:%d: info string word %q is not key=value", file, lineNum, kv)
					}
					b.Attrs[k] = v
				}
			}
			if mm := markerRE.FindStringSubmatch(prev); mm != nil {
				b.Skip = mm[1]
			} else if anyMarkerRE.MatchString(prev) {
				return nil, fmt.Errorf("%s:%d: malformed docs-test marker %q (want <!-- docs-test: skip: REASON -->)", file, lineNum-1, prev)
			}
			cur, indent, fence = &b, m[1], m[2]
			body.Reset()
			prev = line
			continue
		}
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case trimmed == "":
		case strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "* ") || regexp.MustCompile(`^\d+\. `).MatchString(trimmed):
			inList = true
		case !strings.HasPrefix(line, " "):
			inList = false
		}
		if strings.HasPrefix(line, "    ") && strings.TrimSpace(prev) == "" && !inList {
			return nil, fmt.Errorf("%s:%d: an indented code block; fence it with a language (```sh, ```text, ...)", file, lineNum)
		}
		if anyMarkerRE.MatchString(line) && !markerRE.MatchString(line) {
			return nil, fmt.Errorf("%s:%d: malformed docs-test marker %q (want <!-- docs-test: skip: REASON -->)", file, lineNum, line)
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: fence never closed", file, cur.Line)
	}
	return blocks, nil
}

// Files lists README.md and every Markdown file under docs/, relative to root, sorted.
func Files(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing docs: %w", err)
	}
	sort.Strings(files[1:])
	return files, nil
}

// ParseAll parses every file Files lists.
func ParseAll(root string) (map[string][]Block, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	all := map[string][]Block{}
	for _, f := range files {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		bs, err := Parse(f, md)
		if err != nil {
			return nil, err
		}
		all[f] = bs
	}
	return all, nil
}
