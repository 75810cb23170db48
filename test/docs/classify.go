package docs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Kind is how the docs test checks a block.
type Kind int

const (
	// Skipped: marked `<!-- docs-test: skip: REASON -->`; listed, not run.
	Skipped Kind = iota
	// Commands: ```sh (run with bash, must succeed) or ```console (`$ ` lines run,
	// the lines after each are its exact output).
	Commands
	// Manifest: ```yaml of Kubernetes objects, applied to the test cluster as a
	// server-side dry run.
	Manifest
	// PolicyData: ```yaml or ```json whose top-level key is "interlink": passed to
	// `sar-bridge check --policies.data`, which must load it.
	PolicyData
	// Rego: loaded by `sar-bridge check --policies`.
	Rego
	// File: a block with file=NAME, written for the page's later commands, which must
	// name it.
	File
	// JSON: a request or answer shown as JSON; it must parse.
	JSON
	// Text: a diagram or output shown without its command; it may hold no `$ ` prompt.
	Text
)

var kindNames = [...]string{"skipped", "commands", "manifest", "policy data", "rego", "file", "json", "text"}

func (k Kind) String() string { return kindNames[k] }

var promptRE = regexp.MustCompile(`(?m)^\$ `)

// Classify says how a block is checked, or why it cannot be: the safe answer for an
// unknown language or content is an error, so every block is either run or marked.
func Classify(b Block) (Kind, error) {
	if b.Skip != "" {
		return Skipped, nil
	}
	for k := range b.Attrs {
		if k != "file" {
			return 0, fmt.Errorf("%s: unknown info string attribute %q (only file=NAME)", b.Where(), k)
		}
	}
	if name, ok := b.Attrs["file"]; ok {
		if strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
			return 0, fmt.Errorf("%s: file=%s must be a relative path inside the test directory", b.Where(), name)
		}
		switch b.Lang {
		case "yaml", "json", "rego":
			return File, nil
		}
		return 0, fmt.Errorf("%s: file= on a ```%s block (yaml, json or rego only)", b.Where(), b.Lang)
	}
	switch b.Lang {
	case "sh":
		return Commands, nil
	case "console":
		if !promptRE.MatchString(b.Text) {
			return 0, fmt.Errorf("%s: a ```console block without a `$ ` command", b.Where())
		}
		if !strings.HasPrefix(b.Text, "$ ") {
			return 0, fmt.Errorf("%s: a ```console block must start with a `$ ` command", b.Where())
		}
		return Commands, nil
	case "rego":
		return Rego, nil
	case "text":
		if promptRE.MatchString(b.Text) {
			return 0, fmt.Errorf("%s: a ```text block holds a `$ ` command: make it ```console so that it runs", b.Where())
		}
		return Text, nil
	case "json":
		var v any
		if err := json.Unmarshal([]byte(b.Text), &v); err != nil {
			return 0, fmt.Errorf("%s: ```json that does not parse: %w", b.Where(), err)
		}
		if m, ok := v.(map[string]any); ok && len(m) == 1 && m["interlink"] != nil {
			return PolicyData, nil
		}
		return JSON, nil
	case "yaml":
		docs, err := YAMLDocuments(b.Text)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", b.Where(), err)
		}
		objects, data := 0, 0
		for _, d := range docs {
			if d["apiVersion"] != nil && d["kind"] != nil {
				objects++
			} else if len(d) == 1 && d["interlink"] != nil {
				data++
			}
		}
		switch {
		case objects == len(docs) && objects > 0:
			return Manifest, nil
		case data == 1 && len(docs) == 1:
			return PolicyData, nil
		}
		return 0, fmt.Errorf("%s: ```yaml that is neither Kubernetes objects nor policy data (interlink:); mark it <!-- docs-test: skip: REASON --> or give it file=NAME for a command that reads it", b.Where())
	}
	return 0, fmt.Errorf("%s: a ```%s block the docs test cannot run: use sh, console, yaml, json, rego or text, or mark it <!-- docs-test: skip: REASON -->", b.Where(), b.Lang)
}

var docSepRE = regexp.MustCompile(`(?m)^---[ \t]*$`)

// YAMLDocuments splits a YAML stream into its documents, each an object; empty
// documents (comments only) are dropped.
func YAMLDocuments(text string) ([]map[string]any, error) {
	var docs []map[string]any
	for _, part := range docSepRE.Split(text, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(part), &m); err != nil {
			return nil, fmt.Errorf("yaml: %w", err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs, nil
}
