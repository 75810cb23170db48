package authorizer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
)

// The tenant-isolation violation of a pod of team-a aimed at tenant-b's node.
const isolationMsg = `nodeSelector interlink.io/tenant=tenant-b selects tenant "tenant-b", not the pod's tenant "team-a"`

// enforcementAuthorizer decides with the default policy over data (JSON), and records
// its metrics in reg and its decision log events in log.
func enforcementAuthorizer(t *testing.T, data string, reg *prometheus.Registry, dl decisionlog.Log) *Authorizer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	eval, err := policies.New(context.Background(), policies.Options{DataFile: file})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := mapping.Parse([]string{"team-a=interlink.io", "tenant-b=tenant-b.interlink.io"})
	cfg := Config{TenantLabel: "interlink.io/tenant", Mappings: m, DecisionLog: dl}
	rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
	cr := NewCachingReviewer(rev, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	return New(cfg, cr, newView(), eval, NewMetrics(reg), log.NewNopLogger())
}

type recordedLog struct{ events []decisionlog.Event }

func (r *recordedLog) LogDecision(_ context.Context, e decisionlog.Event) {
	r.events = append(r.events, e)
}

// TestEnforcementActions: the front door reaches the policy as input.front_door, each
// rule's action follows data per front door, every violation is counted by rule,
// tenant, action and front door, and the decision log marks what warn and audit let
// through as would_deny.
func TestEnforcementActions(t *testing.T) {
	const data = `{"interlink": {"enforcement": {"tenant-isolation": {"default": "audit", "admission": "warn", "relay": "deny"}}}}`
	pod := podInput("create", "team-a", "runner", `, "node": {"name": "vk-a"}`)
	pod = strings.Replace(pod, `"serviceAccountName"`, `"nodeSelector": {"interlink.io/tenant": "tenant-b"}, "serviceAccountName"`, 1)
	for _, tc := range []struct {
		door        FrontDoor
		wantDoor    string
		wantAllowed bool
		wantAction  string
	}{
		{FrontDoorAdmission, "admission", true, "warn"},
		{FrontDoorRelay, "relay", false, "deny"},
		{FrontDoorDataAPI, "data_api", true, "audit"},
		{"", "data_api", true, "audit"}, // unset: the Data API's
	} {
		t.Run(tc.wantDoor+"/"+string(tc.door), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			dl := &recordedLog{}
			a := enforcementAuthorizer(t, data, reg, dl)
			rec := &recordingEvaluator{Evaluator: a.evaluator}
			a.evaluator = rec
			d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(pod), FrontDoor: tc.door})
			if err != nil {
				t.Fatal(err)
			}
			if got := inputMember(t, rec.last, "front_door"); got != `"`+tc.wantDoor+`"` {
				t.Errorf("input.front_door = %s, want %q", got, tc.wantDoor)
			}
			v, err := ReadVerdict(d)
			if err != nil {
				t.Fatal(err)
			}
			wantViolations := []Violation{{Rule: "tenant-isolation", Message: isolationMsg, Action: tc.wantAction}}
			if v.Allowed != tc.wantAllowed || !reflect.DeepEqual(v.Violations, wantViolations) {
				t.Errorf("allowed %v, violations %+v; want %v, %+v (reason %q)", v.Allowed, v.Violations, tc.wantAllowed, wantViolations, v.Reason)
			}
			if !tc.wantAllowed && v.Reason != isolationMsg {
				t.Errorf("reason %q, want %q", v.Reason, isolationMsg)
			}
			if tc.wantAllowed && v.Reason != `RBAC: allowed by RoleBinding "team-a/offload"` {
				t.Errorf("reason %q, want the review's", v.Reason)
			}
			if n := testutil.ToFloat64(a.metrics.violations.WithLabelValues("tenant-isolation", "team-a", tc.wantAction, tc.wantDoor)); n != 1 {
				t.Errorf("sar_bridge_policy_violations_total{rule=tenant-isolation,tenant=team-a,action=%s,front_door=%s} = %v, want 1", tc.wantAction, tc.wantDoor, n)
			}
			if n := testutil.CollectAndCount(a.metrics.violations); n != 1 {
				t.Errorf("%d series of sar_bridge_policy_violations_total, want 1", n)
			}
			if len(dl.events) != 1 {
				t.Fatalf("%d decision log events, want 1", len(dl.events))
			}
			logged, _ := dl.events[0].Result.(ast.Object)
			would := logged.Get(ast.StringTerm("would_deny"))
			switch {
			case tc.wantAction == "deny" && would != nil:
				t.Errorf("a denied decision is logged with would_deny %v", would)
			case tc.wantAction != "deny" && (would == nil || would.String() != `[{"action": "`+tc.wantAction+`", "message": `+ast.StringTerm(isolationMsg).String()+`, "rule": "tenant-isolation"}]`):
				t.Errorf("logged would_deny = %v", would)
			}
			if d.Result.(ast.Object).Get(ast.StringTerm("would_deny")) != nil {
				t.Error("the answer carries would_deny: only the decision log's copy should")
			}
		})
	}
}

// TestQuotaRefusalIsAViolation: the ledger's refusal of a charge is a deny of rule
// quota in the decision's violations, in order.
func TestQuotaRefusalIsAViolation(t *testing.T) {
	v := func(rule, msg, action string) *ast.Term {
		return violationTerm(Violation{Rule: rule, Message: msg, Action: action})
	}
	for _, tc := range []struct {
		name string
		in   []*ast.Term
		want []*ast.Term
	}{
		{"none", nil, []*ast.Term{v("quota", "over", "deny")}},
		{"between", []*ast.Term{v("caps", "x", "warn"), v("site.a", "y", "audit")}, []*ast.Term{v("caps", "x", "warn"), v("quota", "over", "deny"), v("site.a", "y", "audit")}},
		{"same rule", []*ast.Term{v("quota", "a", "warn"), v("quota", "z", "warn")}, []*ast.Term{v("quota", "a", "warn"), v("quota", "over", "deny"), v("quota", "z", "warn")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result := ast.NewObject(ast.Item(ast.StringTerm("allowed"), ast.BooleanTerm(true)), ast.Item(ast.StringTerm("violations"), ast.ArrayTerm(tc.in...)))
			got := deniedBy(result, "over").(ast.Object)
			if w := ast.NewArray(tc.want...); got.Get(ast.StringTerm("violations")).Value.Compare(w) != 0 {
				t.Errorf("violations %v, want %v", got.Get(ast.StringTerm("violations")), w)
			}
			if got.Get(ast.StringTerm("allowed")).Value.Compare(ast.Boolean(false)) != 0 {
				t.Errorf("allowed %v", got.Get(ast.StringTerm("allowed")))
			}
		})
	}
}

// TestReadViolations: the verdict's violations are read strictly; a malformed one is an
// error, never ignored.
func TestReadViolations(t *testing.T) {
	for _, tc := range []struct {
		name, result string
		want         []Violation
		wantErr      string
	}{
		{"absent", `{"allowed": true}`, nil, ""},
		{"null", `{"allowed": true, "violations": null}`, nil, ""},
		{"read", `{"allowed": true, "violations": [{"rule": "caps", "message": "m", "action": "warn"}]}`, []Violation{{Rule: "caps", Message: "m", Action: "warn"}}, ""},
		{"not an array", `{"allowed": true, "violations": {}}`, nil, "violations: a object, not an array"},
		{"not a string", `{"allowed": true, "violations": [{"rule": "caps", "message": 1, "action": "warn"}]}`, nil, "violations: 0: message is not a string"},
		{"unknown action", `{"allowed": false, "violations": [{"rule": "caps", "message": "m", "action": "block"}]}`, nil, `violations: 0: rule "caps": action "block" is not deny, warn or audit`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ReadVerdict(Decision{Result: ast.MustParseTerm(tc.result).Value, Defined: true})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v.Violations, tc.want) {
				t.Errorf("violations %+v, want %+v", v.Violations, tc.want)
			}
			// The JSON reader (the Go client's) reads the same.
			var raw any
			dec := json.NewDecoder(strings.NewReader(tc.result))
			dec.UseNumber()
			if err := dec.Decode(&raw); err != nil {
				t.Fatal(err)
			}
			jv, err := decisionapi.ReadVerdict(raw)
			if err != nil || !reflect.DeepEqual(jv.Violations, tc.want) {
				t.Errorf("decisionapi.ReadVerdict: %+v, %v", jv.Violations, err)
			}
		})
	}
}

// inputMember reads input member name as Rego text.
func inputMember(t *testing.T, v ast.Value, name string) string {
	t.Helper()
	obj, ok := v.(ast.Object)
	if !ok {
		t.Fatalf("input %v is not an object", v)
	}
	m := obj.Get(ast.StringTerm(name))
	if m == nil {
		return "<absent>"
	}
	return m.String()
}

// TestEnforcementMemoKeysOnFrontDoor: the decision memo keys on input.front_door (the
// policy reads it), so a result memoised for one front door never answers another.
func TestEnforcementMemoKeysOnFrontDoor(t *testing.T) {
	const data = `{"interlink": {"enforcement": {"tenant-isolation": {"admission": "warn"}}}}`
	pod := podInput("create", "team-a", "runner", `, "node": {"name": "vk-a"}`)
	pod = strings.Replace(pod, `"serviceAccountName"`, `"nodeSelector": {"interlink.io/tenant": "tenant-b"}, "serviceAccountName"`, 1)
	a := enforcementAuthorizer(t, data, prometheus.NewRegistry(), nil)
	for i, door := range []FrontDoor{FrontDoorAdmission, FrontDoorAdmission, FrontDoorRelay, FrontDoorRelay, FrontDoorAdmission, FrontDoorRelay, FrontDoorDataAPI} {
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(pod), FrontDoor: door})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ReadVerdict(d)
		if err != nil {
			t.Fatal(err)
		}
		if want := door == FrontDoorAdmission; v.Allowed != want || len(v.Violations) != 1 {
			t.Errorf("decision %d at %s: allowed %v (violations %+v), want %v", i, door, v.Allowed, v.Violations, want)
		}
	}
	if hits := testutil.ToFloat64(a.metrics.memo.WithLabelValues("hit")); hits != 2 {
		t.Errorf("%v memo hits, want 2 (the fifth and sixth decisions)", hits)
	}
}
