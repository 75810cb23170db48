package docs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestFlagsReference: the committed flags page is what the generator writes from the
// binary's --help.
func TestFlagsReference(t *testing.T) {
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	binary, err := cluster.BuildBridge(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := FlagsReference(binary)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, FlagsPath))
	if err != nil {
		t.Fatalf("%v: run `%s`", err, RegenerateCommand)
	}
	if string(got) != want {
		t.Errorf("%s is not what the binary's --help makes: run `%s` and commit it\n%s", FlagsPath, RegenerateCommand, firstDiff(string(got), want))
	}
	for _, cmd := range []string{"`sar-bridge`", "`sar-bridge check`", "`sar-bridge who-can`", "`sar-bridge discovery`", "`sar-bridge helm-postrender`", "`sar-bridge ledger-marks`"} {
		if !strings.Contains(want, "## "+cmd+"\n") {
			t.Errorf("the flags page has no section %s", cmd)
		}
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  committed: " + gl + "\n  generated: " + wl
		}
	}
	return ""
}

// TestLinks: every relative link of the README and docs/ names a file that exists and,
// with #anchor, a heading of it.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d Markdown files: %v", len(files), files)
	}
	for _, f := range files {
		bad, err := CheckLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Error(b)
		}
	}
}

// TestBlocksClassified: every fenced block of the README and docs/ is one the e2e docs
// test runs, applies or loads, or carries a skip marker with its reason; a file= block
// is read by a later command of its page. The e2e test (test/e2e, TestDocs) runs them.
func TestBlocksClassified(t *testing.T) {
	all, err := ParseAll(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Kind]int{}
	for file, blocks := range all {
		for i, b := range blocks {
			k, err := Classify(b)
			if err != nil {
				t.Error(err)
				continue
			}
			counts[k]++
			if k == Skipped {
				t.Logf("skipped %s: %s", b.Where(), b.Skip)
			}
			if k == File && !readLater(blocks[i+1:], b.Attrs["file"]) {
				t.Errorf("%s: file=%s is read by no later command of %s", b.Where(), b.Attrs["file"], file)
			}
		}
	}
	t.Logf("blocks: %v", counts)
	if counts[Commands] == 0 || counts[Manifest] == 0 || counts[PolicyData] == 0 || counts[Rego] == 0 {
		t.Errorf("some kind of block is missing from the docs (the parser is likely broken): %v", counts)
	}
}

func readLater(blocks []Block, name string) bool {
	for _, b := range blocks {
		dir, _, _ := strings.Cut(name, "/")
		if k, err := Classify(b); err == nil && k == Commands && (strings.Contains(b.Text, name) || dir != name && strings.Contains(b.Text, dir+"/")) {
			return true
		}
	}
	return false
}

// TestParse: the parser's rules, on small pages.
func TestParse(t *testing.T) {
	cases := []struct {
		name, md string
		want     []Kind
		err      string
	}{
		{"sh", "x\n\n```sh\necho hi\n```\n", []Kind{Commands}, ""},
		{"marked go", "<!-- docs-test: skip: a fragment -->\n```go\nx := 1\n```\n", []Kind{Skipped}, ""},
		{"unmarked go", "```go\nx := 1\n```\n", nil, "cannot run"},
		{"no language", "```\nkubectl apply -f x\n```\n", nil, "cannot run"},
		{"indented code", "text\n\n    kubectl apply -f x\n", nil, "indented code block"},
		{"list continuation", "- item\n\n    more of the item\n", nil, ""},
		{"manifest", "```yaml\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n```\n", []Kind{Manifest}, ""},
		{"policy data", "```yaml\ninterlink:\n  limits: {}\n```\n", []Kind{PolicyData}, ""},
		{"other yaml", "```yaml\nSidecarURL: x\n```\n", nil, "neither Kubernetes objects nor policy data"},
		{"text with a prompt", "```text\n$ kubectl get pods\n```\n", nil, "make it ```console"},
		{"console without prompt", "```console\nyes\n```\n", nil, "without a `$ ` command"},
		{"bad json", "```json\n{\"a\": [...]}\n```\n", nil, "does not parse"},
		{"misspelt marker", "<!-- docs-test skip -->\n```go\nx\n```\n", nil, "malformed docs-test marker"},
		{"marker not just before", "<!-- docs-test: skip: far -->\n\n```go\nx\n```\n", nil, "cannot run"},
		{"file on sh", "```sh file=x.sh\necho\n```\n", nil, "file= on a ```sh block"},
		{"indented fence", "- item\n\n  ```text\n  out\n  ```\n", []Kind{Text}, ""},
		{"code span at a line's start", "text\n```` ```sh ```` blocks run\n", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			blocks, err := Parse("x.md", []byte(tc.md))
			var kinds []Kind
			if err == nil {
				for _, b := range blocks {
					k, cerr := Classify(b)
					if cerr != nil {
						err = cerr
						break
					}
					kinds = append(kinds, k)
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(kinds) != len(tc.want) {
				t.Fatalf("kinds %v, want %v", kinds, tc.want)
			}
			for i := range kinds {
				if kinds[i] != tc.want[i] {
					t.Fatalf("kinds %v, want %v", kinds, tc.want)
				}
			}
		})
	}
}

// TestAnchors: GitHub's heading anchors, as links use them.
func TestAnchors(t *testing.T) {
	a := Anchors("# Install\n## interLink's mesh networking\n## Check a pod: `sar-bridge check`\n## OPA bundles, decision logs and status\n## Install\n```sh\n# not a heading\n```\n")
	for _, want := range []string{"install", "interlinks-mesh-networking", "check-a-pod-sar-bridge-check", "opa-bundles-decision-logs-and-status", "install-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a fenced block became an anchor")
	}
}
