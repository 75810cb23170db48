package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^(#{1,6}) +(.+?) *#*$`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// Anchors returns the anchors GitHub gives a Markdown file's headings: lower case,
// punctuation dropped, spaces made hyphens, a repeated one suffixed -1, -2, ...
// Headings inside fenced blocks do not count.
func Anchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if isFence(line) {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(m[2]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// CheckLinks returns one message per relative link of file (relative to root) whose
// target does not exist, or whose #anchor names no heading of its Markdown target.
// Links inside fenced blocks are not links.
func CheckLinks(root, file string) ([]string, error) {
	md, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	var bad []string
	inFence := false
	for i, line := range strings.Split(string(md), "\n") {
		if isFence(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			p, anchor, _ := strings.Cut(target, "#")
			dest := file
			if p != "" {
				dest = path.Join(path.Dir(file), p)
			}
			where := fmt.Sprintf("%s:%d: link %s", file, i+1, target)
			st, err := os.Stat(filepath.Join(root, dest))
			if err != nil {
				bad = append(bad, where+": no such file "+dest)
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(dest, ".md") {
				bad = append(bad, where+": an anchor on a target that is not Markdown")
				continue
			}
			text, err := os.ReadFile(filepath.Join(root, dest))
			if err != nil {
				return nil, err
			}
			if !Anchors(string(text))[anchor] {
				bad = append(bad, fmt.Sprintf("%s: %s has no heading #%s", where, dest, anchor))
			}
		}
	}
	return bad, nil
}

// isFence: the line opens or closes a fenced block (see Parse).
func isFence(line string) bool {
	m := fenceRE.FindStringSubmatch(line)
	return m != nil && !strings.Contains(m[3], "`")
}
