package slurmjob

import (
	"path"
	"strings"
)

// UnderPrefix says whether p lies at or under prefix, matched as paths: both must
// be absolute and free of ".." elements, so /scratch/team-a covers /scratch/team-a/x
// but neither /scratch/team-ab nor /scratch/team-a/../b. ".." is refused rather than
// cleaned away because the kernel resolves it after symlinks ("a/link/.." need not be
// "a"); symlinks inside the prefix that lead out of it are the site's to avoid.
func UnderPrefix(p, prefix string) bool {
	p, ok := cleanAbs(p)
	if !ok {
		return false
	}
	prefix, ok = cleanAbs(prefix)
	if !ok {
		return false
	}
	return prefix == "/" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

// cleanAbs is p cleaned ("//" and "." elements and a trailing slash removed); false
// when p is relative or has a ".." element.
func cleanAbs(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", false
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", false
		}
	}
	return path.Clean(p), true
}
