package v1alpha1

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func pod(uid, name, node string, pods string, sec int64) Charge {
	return Charge{UID: types.UID(uid), Namespace: "team-a", Name: name, Node: node,
		Amounts: corev1.ResourceList{"pods": resource.MustParse(pods)}, Time: metav1.NewTime(time.Unix(sec, 0).UTC())}
}

const t0 = 1764390000 // 2025-11-29T04:20:00Z

func TestPendingChargesStored(t *testing.T) {
	withCluster := func(c Charge, cluster string) Charge { c.Cluster = cluster; return c }
	withNanos := func(c Charge) Charge { c.Time = metav1.NewTime(c.Time.Add(500 * time.Millisecond)); return c }
	cases := []struct {
		name    string
		charges PendingCharges
		want    string
	}{
		{"none", PendingCharges{}, `[]`},
		{"one: as before grouping", PendingCharges{pod("u1", "p1", "vk-1", "1", t0)},
			`[{"uid":"u1","namespace":"team-a","name":"p1","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"}]`},
		{"one write's batch: one entry", PendingCharges{pod("u1", "p1", "vk-1", "1", t0), pod("u2", "p2", "vk-1", "1", t0), withNanos(pod("u3", "p3", "vk-1", "1", t0))},
			`[{"uid":"u1","namespace":"team-a","name":"p1","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","pods":["p2/u2","p3/u3"]}]`},
		{"a name or a UID unknown", PendingCharges{pod("u1", "p1", "", "1", t0), pod("", "p2", "", "1", t0), pod("u3", "", "", "1", t0)},
			`[{"uid":"u1","namespace":"team-a","name":"p1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","pods":["p2/","/u3"]}]`},
		{"another second, node, amount or cluster: another entry", PendingCharges{pod("u1", "p1", "vk-1", "1", t0), pod("u2", "p2", "vk-1", "1", t0+1),
			pod("u3", "p3", "vk-2", "1", t0+1), pod("u4", "p4", "vk-2", "2", t0+1), withCluster(pod("u5", "p5", "vk-2", "2", t0+1), "b")},
			`[{"uid":"u1","namespace":"team-a","name":"p1","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u2","namespace":"team-a","name":"p2","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:01Z"},` +
				`{"uid":"u3","namespace":"team-a","name":"p3","node":"vk-2","amounts":{"pods":"1"},"time":"2025-11-29T04:20:01Z"},` +
				`{"uid":"u4","namespace":"team-a","name":"p4","node":"vk-2","amounts":{"pods":"2"},"time":"2025-11-29T04:20:01Z"},` +
				`{"uid":"u5","namespace":"team-a","name":"p5","node":"vk-2","amounts":{"pods":"2"},"time":"2025-11-29T04:20:01Z","cluster":"b"}]`},
		{"only consecutive charges: the order is kept", PendingCharges{pod("u1", "p1", "vk-1", "1", t0), pod("u2", "p2", "vk-2", "1", t0), pod("u3", "p3", "vk-1", "1", t0)},
			`[{"uid":"u1","namespace":"team-a","name":"p1","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u2","namespace":"team-a","name":"p2","node":"vk-2","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u3","namespace":"team-a","name":"p3","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"}]`},
		{"a name or UID holding the separator: an entry of its own", PendingCharges{pod("u1", "p1", "", "1", t0), pod("u/2", "p2", "", "1", t0), pod("u3", "p3", "", "1", t0), pod("u4", "p/4", "", "1", t0)},
			`[{"uid":"u1","namespace":"team-a","name":"p1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u/2","namespace":"team-a","name":"p2","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u3","namespace":"team-a","name":"p3","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"},` +
				`{"uid":"u4","namespace":"team-a","name":"p/4","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"}]`},
		{"equal amounts in another form: one entry", PendingCharges{pod("u1", "p1", "", "1", t0), pod("u2", "p2", "", "1000m", t0)},
			`[{"uid":"u1","namespace":"team-a","name":"p1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","pods":["p2/u2"]}]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.charges)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want {
				t.Fatalf("stored\n%s\nwant\n%s", data, tc.want)
			}
			var back PendingCharges
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			// Read back: one charge per pod, in order, as the API keeps them (seconds).
			want := make(PendingCharges, len(tc.charges))
			for i, c := range tc.charges {
				c.Time = metav1.NewTime(c.Time.Truncate(time.Second).Local())
				c.Amounts = corev1.ResourceList{"pods": resource.MustParse(c.Amounts.Pods().String())}
				want[i] = c
			}
			if len(back) != len(want) {
				t.Fatalf("read back %d charges, want %d", len(back), len(want))
			}
			for i := range want {
				if !charged(back[i], want[i]) {
					t.Errorf("charge %d read back as %+v, want %+v", i, back[i], want[i])
				}
			}
		})
	}
}

// charged compares two decoded charges field by field (quantities by value and form).
func charged(a, b Charge) bool {
	return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name && a.Node == b.Node && a.Cluster == b.Cluster &&
		a.Time.Equal(&b.Time) && sameAmounts(a.Amounts, b.Amounts) && a.Pods == nil && b.Pods == nil
}

func TestPendingChargesRead(t *testing.T) {
	cases := []struct {
		name, stored string
		want         []string // uid/name@node of each charge
		err          string
	}{
		{"null", `null`, nil, ""},
		{"an entry as stored before grouping", `[{"uid":"u1","namespace":"a","name":"p1","node":"vk-1","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"}]`,
			[]string{"u1/p1@vk-1"}, ""},
		{"pods of an entry, each its own charge", `[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","node":"vk-2","uid":"u1","name":"p1","pods":["p2/u2","/u3","p4/"]},{"uid":"u5","namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z"}]`,
			[]string{"u1/p1@vk-2", "u2/p2@vk-2", "u3/@vk-2", "/p4@vk-2", "u5/@"}, ""},
		{"an entry of pods only", `[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","pods":["p2/u2"]}]`,
			[]string{"/@", "u2/p2@"}, ""},
		{"a pod without the separator: no charge dropped, an error", `[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","uid":"u1","pods":["p2"]}]`,
			nil, `pending charge of namespace "a": pod "p2" is not NAME/UID`},
		{"an empty pod", `[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","uid":"u1","pods":["/"]}]`,
			nil, `pending charge of namespace "a": pod "/" is not NAME/UID`},
		{"a UID with the separator", `[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","uid":"u1","pods":["p/u/2"]}]`,
			nil, `pending charge of namespace "a": pod "p/u/2" is not NAME/UID`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got PendingCharges
			err := json.Unmarshal([]byte(tc.stored), &got)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, c := range got {
				ids = append(ids, string(c.UID)+"/"+c.Name+"@"+c.Node)
				if c.Pods != nil || c.Amounts.Pods().String() != "1" {
					t.Errorf("charge %+v: want one pod holding pods 1", c)
				}
			}
			if !reflect.DeepEqual(ids, tc.want) {
				t.Errorf("charges %v, want %v", ids, tc.want)
			}
		})
	}
}

// A decoded entry's pods do not share its amounts: changing one charge's changes no other.
func TestPendingChargesReadApart(t *testing.T) {
	var got PendingCharges
	if err := json.Unmarshal([]byte(`[{"namespace":"a","amounts":{"pods":"1"},"time":"2025-11-29T04:20:00Z","uid":"u1","pods":["p2/u2"]}]`), &got); err != nil {
		t.Fatal(err)
	}
	got[1].Amounts["pods"] = resource.MustParse("7")
	if s := got[0].Amounts.Pods().String(); s != "1" {
		t.Errorf("the first charge holds %s pods after the second's changed, want 1", s)
	}
}

// The status of a 1,000-pod burst charged in batches of 16: how much smaller grouping
// makes it (docs/tenants.md, "What the end of a quota costs").
func TestPendingChargesSize(t *testing.T) {
	var charges PendingCharges
	for i := range 1000 {
		charges = append(charges, pod("6c1f0e9a-3b2d-4f1e-9a7b-"+strings.Repeat("0", 8)+string(rune('a'+i%26))+"123", "array-r0-"+string(rune('a'+i%26))+"-abcde", "vk-1", "1", t0+int64(i/16)))
	}
	grouped, _ := json.Marshal(charges)
	flat, _ := json.Marshal([]Charge(charges))
	if len(grouped) != 63183 || len(flat) != 161001 {
		t.Errorf("1,000 charges in batches of 16: %d bytes grouped, %d one entry each", len(grouped), len(flat))
	}
}
