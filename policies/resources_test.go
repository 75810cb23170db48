package policies

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// TestPodResources: amounts parsed as units.parse does, largest per resource the limit
// or else the request of one container, and null whenever an amount is not a quantity
// string of the default policy's grammar (the policy then reads input.pod itself).
func TestPodResources(t *testing.T) {
	for _, tc := range []struct {
		name, pod, want string
	}{
		{"limits and requests", `{"spec": {"containers": [
			{"name": "main", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}},
			{"name": "side", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}`,
			`{"containers": [{"name": "main", "limits": {"cpu": 2, "memory": 4294967296}, "requests": {"cpu": 1, "memory": 2147483648}},
				{"name": "side", "limits": {}, "requests": {"cpu": 0.1, "memory": 67108864}}],
			  "largest": {"cpu": 2, "memory": 4294967296}, "unlimited": ["side"]}`},
		{"a request counts where no limit is set", `{"spec": {"containers": [
			{"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "500m", "memory": "8Gi"}}},
			{"resources": {"requests": {"cpu": "3"}}}]}}`,
			`{"containers": [{"name": "", "limits": {"cpu": 1}, "requests": {"cpu": 0.5, "memory": 8589934592}}, {"name": "", "limits": {}, "requests": {"cpu": 3}}],
			  "largest": {"cpu": 3, "memory": 8589934592}, "unlimited": []}`},
		{"init containers after containers", `{"spec": {"containers": [{"name": "a"}],
			"initContainers": [{"name": 7, "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}`,
			`{"containers": [{"name": "a", "limits": {}, "requests": {}}, {"name": "", "limits": {"nvidia.com/gpu": 2}, "requests": {}}], "largest": {"nvidia.com/gpu": 2}, "unlimited": ["a"]}`},
		{"null resources and amounts lists", `{"spec": {"containers": [{"resources": null}, {"resources": {"limits": null, "requests": {}}}]}}`,
			`{"containers": [{"name": "", "limits": {}, "requests": {}}, {"name": "", "limits": {}, "requests": {}}], "largest": {}, "unlimited": []}`},
		{"unlimited names once each, in order", `{"spec": {"containers": [{"name": "b"}, {"name": "a", "resources": {"limits": null}}, {"name": "b", "resources": {"limits": {}}}, {"name": "c", "resources": {"limits": {"cpu": "1"}}}],
			"initContainers": [{"name": "c"}, {"name": "a"}]}}`,
			`{"containers": [{"name": "b", "limits": {}, "requests": {}}, {"name": "a", "limits": {}, "requests": {}}, {"name": "b", "limits": {}, "requests": {}},
				{"name": "c", "limits": {"cpu": 1}, "requests": {}}, {"name": "c", "limits": {}, "requests": {}}, {"name": "a", "limits": {}, "requests": {}}],
			  "largest": {"cpu": 1}, "unlimited": ["b", "a", "c"]}`},
		{"exponent and decimal SI", `{"spec": {"containers": [{"resources": {"limits": {"cpu": "1.5", "memory": "1e3"}}}]}}`,
			`{"containers": [{"name": "", "limits": {"cpu": 1.5, "memory": 1000}, "requests": {}}], "largest": {"cpu": 1.5, "memory": 1000}, "unlimited": []}`},
		{"no containers", `{"metadata": {"name": "p"}}`, `{"containers": [], "largest": {}, "unlimited": []}`},
		{"a quantity outside the grammar", `{"spec": {"containers": [{"resources": {"limits": {"cpu": "5u"}}}]}}`, `null`},
		{"a number, not a string", `{"spec": {"containers": [{"resources": {"limits": {"cpu": 2}}}]}}`, `null`},
		{"a null amount", `{"spec": {"containers": [{"resources": {"limits": {"cpu": null}}}]}}`, `null`},
		{"not a quantity", `{"spec": {"containers": [{"resources": {"requests": {"memory": "lots"}}}]}}`, `null`},
		{"containers not an array", `{"spec": {"containers": {"name": "a"}}}`, `null`},
		{"a container not an object", `{"spec": {"containers": ["a"]}}`, `null`},
		{"resources not an object", `{"spec": {"containers": [{"resources": "big"}]}}`, `null`},
		{"limits not an object", `{"spec": {"containers": [{"resources": {"limits": ["1"]}}]}}`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := ast.MustParseTerm(tc.pod).Value
			want := ast.MustParseTerm(tc.want).Value
			if got := PodResources(pod); ast.Compare(got, want) != 0 {
				t.Errorf("PodResources =\n %v\nwant\n %v", got, want)
			}
		})
	}
}

// TestDerivedValuesOwnTheirTerms: what the bridge derives from a pod (SpecDerived)
// shares no term with the decoded pod they come from. The bridge keeps them beyond the request, and one
// term of the pod would keep its whole input alive (astjson cuts terms from shared blocks).
func TestDerivedValuesOwnTheirTerms(t *testing.T) {
	obj, _, err := astjson.DecodeObject([]byte(benchPod), nil)
	if err != nil {
		t.Fatal(err)
	}
	podTerms := map[*ast.Term]bool{}
	ast.WalkTerms(obj, func(x *ast.Term) bool {
		podTerms[x] = true
		return false
	})
	for _, m := range DeriveFromPod(obj).Members() {
		name, derived := m[0].Value, m[1].Value
		ast.WalkTerms(derived, func(x *ast.Term) bool {
			if podTerms[x] {
				t.Errorf("input.%s holds the pod's term %v", name, x)
			}
			return false
		})
		if ast.Compare(derived, ast.Null{}) == 0 {
			t.Errorf("input.%s is null for the bench pod", name)
		}
	}
}

// TestWholeQuantity: the integer reading of common amounts gives units.parse's number to
// the digit, and declines what it cannot read exactly.
func TestWholeQuantity(t *testing.T) {
	parse := func(s string) (string, bool) {
		var out ast.Value
		err := unitsParse(topdown.BuiltinContext{}, []*ast.Term{ast.StringTerm(s)}, func(t *ast.Term) error {
			out = t.Value
			return nil
		})
		if err != nil || out == nil {
			return "", false
		}
		return out.String(), true
	}
	amounts := []string{"0", "00", "007", "1", "4", "100", "1500Mi", "2Gi", "3k", "5M", "7G", "9T", "11P", "15E", "1Ki", "1Ti", "1Pi", "15Ei",
		"18446744073709551615", "18446744073709551616", "16Ei", "18E", "19E", "99999999999999999999Ki"}
	rng := rand.New(rand.NewPCG(1, 2))
	suffixes := []string{"", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	for range 2000 {
		digits := make([]byte, 1+rng.IntN(20))
		for i := range digits {
			digits[i] = byte('0' + rng.IntN(10))
		}
		amounts = append(amounts, string(digits)+suffixes[rng.IntN(len(suffixes))])
	}
	whole := 0
	for _, s := range amounts {
		n, ok := wholeQuantity(s)
		want, parsed := parse(s)
		if !parsed {
			t.Fatalf("units.parse(%q) failed", s)
		}
		if !ok {
			if want != "" && len(want) < 20 && !strings.ContainsAny(want, ".e") {
				if _, err := strconv.ParseUint(want, 10, 64); err == nil {
					t.Errorf("wholeQuantity(%q) declined a whole number under 64 bits: %s", s, want)
				}
			}
			continue
		}
		whole++
		if got := strconv.FormatUint(n, 10); got != want {
			t.Errorf("wholeQuantity(%q) = %s, units.parse gives %s", s, got, want)
		}
	}
	for _, s := range []string{"", "m", "500m", "1.5", "+1", "-1", "1e3", "1E3", "1 Gi", "1Gb", "1gi", "Mi"} {
		if n, ok := wholeQuantity(s); ok {
			t.Errorf("wholeQuantity(%q) = %d, want it declined", s, n)
		}
	}
	t.Logf("%d of %d amounts read in integers", whole, len(amounts))
}
