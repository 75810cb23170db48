package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PendingCharges are a tenant's pending charges, one pod each. Stored, consecutive
// charges that differ only in their pod (one write's batch: same namespace, node,
// amounts, second and cluster) are one entry: the first pod in uid and name, the others
// in pods as NAME/UID. A status write's cost grows with its size, and near a quota's end
// a burst leaves about a thousand charges pending: one entry each was some 166 bytes a
// pod, and a 166 KB status took the API server 150 ms to write (docs/tenants.md, "What
// the end of a quota costs"). Decoding expands every entry again, so code reads and
// changes one charge per pod and never sees the grouping.
type PendingCharges []Charge

// podSep separates a pod's name from its UID in Charge.Pods. Neither a pod name nor a
// UID the API assigns holds it; a charge whose name or UID (from a decision's input)
// does hold it is stored in an entry of its own.
const podSep = "/"

// MarshalJSON writes the grouped form.
func (p PendingCharges) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	return json.Marshal(groupCharges(p))
}

// UnmarshalJSON reads the grouped form (and single entries, as stored before grouping),
// one charge per pod. An entry of pods that cannot be read is an error: no charge is
// ever dropped because it could not be read.
func (p *PendingCharges) UnmarshalJSON(data []byte) error {
	var entries []Charge
	if err := json.Unmarshal(data, &entries); err != nil {
		return err
	}
	if entries == nil {
		*p = nil
		return nil
	}
	out, err := expandCharges(entries)
	if err != nil {
		return err
	}
	*p = out
	return nil
}

// groupCharges is the stored form of charges: consecutive ones that only their pod
// tells apart share one entry.
func groupCharges(charges []Charge) []Charge {
	out := make([]Charge, 0, len(charges))
	for i := 0; i < len(charges); {
		head := charges[i]
		head.Pods = nil
		if !groupable(charges[i]) {
			out = append(out, charges[i])
			i++
			continue
		}
		j := i + 1
		for ; j < len(charges) && groupable(charges[j]) && sameGroup(charges[i], charges[j]); j++ {
			head.Pods = append(head.Pods, charges[j].Name+podSep+string(charges[j].UID))
		}
		out = append(out, head)
		i = j
	}
	return out
}

// expandCharges is the inverse of groupCharges: one charge per pod, in order.
func expandCharges(entries []Charge) ([]Charge, error) {
	n := 0
	for _, e := range entries {
		n += 1 + len(e.Pods)
	}
	out := make([]Charge, 0, n)
	for _, e := range entries {
		pods := e.Pods
		e.Pods = nil
		out = append(out, e)
		for _, pod := range pods {
			name, uid, ok := strings.Cut(pod, podSep)
			if !ok || name == "" && uid == "" || strings.Contains(uid, podSep) {
				return nil, fmt.Errorf("pending charge of namespace %q: pod %q is not NAME/UID", e.Namespace, pod)
			}
			c := e
			c.Name, c.UID = name, types.UID(uid)
			c.Amounts = e.Amounts.DeepCopy()
			out = append(out, c)
		}
	}
	return out, nil
}

// groupable: a charge for one pod whose name and UID can be written as NAME/UID.
func groupable(c Charge) bool {
	return len(c.Pods) == 0 && (c.Name != "" || c.UID != "") &&
		!strings.Contains(c.Name, podSep) && !strings.Contains(string(c.UID), podSep)
}

// sameGroup: b differs from a in its pod only, as stored (the API keeps seconds).
func sameGroup(a, b Charge) bool {
	return a.Namespace == b.Namespace && a.Node == b.Node && a.Cluster == b.Cluster &&
		a.Time.Unix() == b.Time.Unix() && sameAmounts(a.Amounts, b.Amounts)
}

func sameAmounts(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		r, ok := b[name]
		if !ok || q.Cmp(r) != 0 {
			return false
		}
	}
	return true
}
