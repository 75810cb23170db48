package mapping

import (
	"slices"
	"sort"
)

// Groups lists every mapped API group once (the fallback's included), sorted.
func (m Mappings) Groups() []string {
	groups := make([]string, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	return slices.Compact(groups)
}
