// Package mapping resolves a pod's tenant and the Kubernetes API group that tenant's
// RBAC rules live in.
package mapping

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Fallback is the tenant key whose group applies to every tenant without its own mapping.
const Fallback = "*"

// Mappings maps tenants to API groups. The zero value maps nothing.
type Mappings struct {
	groups map[string]string
}

// Parse reads "tenant=group" pairs as given to --openshift.mappings. A tenant may appear
// once; "*" names the fallback group.
func Parse(pairs []string) (Mappings, error) {
	groups := make(map[string]string, len(pairs))
	for _, pair := range pairs {
		tenant, group, err := parsePair(pair)
		if err != nil {
			return Mappings{}, err
		}
		if prev, dup := groups[tenant]; dup && prev != group {
			return Mappings{}, fmt.Errorf("mapping %q: tenant %q is already mapped to %q", pair, tenant, prev)
		}
		groups[tenant] = group
	}
	return Mappings{groups: groups}, nil
}

// parsePair splits and checks one "tenant=group" pair.
func parsePair(pair string) (tenant, group string, err error) {
	tenant, group, ok := strings.Cut(pair, "=")
	tenant, group = strings.TrimSpace(tenant), strings.TrimSpace(group)
	if !ok || tenant == "" || group == "" {
		return "", "", fmt.Errorf("mapping %q: want tenant=group", pair)
	}
	// An API group is a DNS subdomain; anything else can never match an RBAC rule
	// and would silently deny every pod of the tenant.
	if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
		return "", "", fmt.Errorf("mapping %q: group %q is not a valid API group: %s", pair, group, strings.Join(errs, "; "))
	}
	return tenant, group, nil
}

// Group returns the API group of a tenant: its own mapping, else the fallback.
func (m Mappings) Group(tenant string) (string, bool) {
	if g, ok := m.groups[tenant]; ok && tenant != Fallback {
		return g, true
	}
	g, ok := m.groups[Fallback]
	return g, ok
}

// Named returns the API group of a tenant its own mapping names, the fallback ignored.
func (m Mappings) Named(tenant string) (string, bool) {
	if tenant == Fallback {
		return "", false
	}
	g, ok := m.groups[tenant]
	return g, ok
}

// Len is the number of mappings, the fallback included.
func (m Mappings) Len() int { return len(m.groups) }

// String lists the mappings in a stable order, for logs.
func (m Mappings) String() string {
	pairs := make([]string, 0, len(m.groups))
	for t, g := range m.groups {
		pairs = append(pairs, t+"="+g)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Tenant returns the tenant of a namespace: the value of labelKey on it when present and
// non-empty, else the namespace name.
func Tenant(namespace string, labels map[string]string, labelKey string) string {
	if t := labels[labelKey]; t != "" {
		return t
	}
	return namespace
}
