package app

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/internal/tenants"
)

const ledgerMarksName = "sar-bridge-ledger-marks"

func TestLedgerMarksCmd(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{name: "prints the file", stdout: string(files.LedgerMarks)},
		{name: "argument", args: []string{"x"}, code: 2, stderr: "sar-bridge ledger-marks: unexpected arguments [\"x\"]\n"},
		{name: "unknown flag", args: []string{"--group", "g"}, code: 2, stderr: "sar-bridge ledger-marks: unknown flag: --group\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := LedgerMarks(tc.args, nil, &stdout, &stderr)
			if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("ledger-marks %q: exit %d, stdout:\n%s\nstderr %q\nwant exit %d, stderr %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stderr)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := LedgerMarks([]string{"--help"}, nil, &stdout, &stderr); code != 0 || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "sar-bridge ledger-marks | kubectl apply -f -\n") {
		t.Errorf("--help: exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
}

// ledgerMarksObjects decodes the embedded file strictly into the API's types.
func ledgerMarksObjects(t *testing.T) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	docs := strings.Split(string(files.LedgerMarks), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the policy and its binding", len(docs))
	}
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &p); err != nil {
		t.Fatalf("the policy: %v", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &b); err != nil {
		t.Fatalf("the binding: %v", err)
	}
	return &p, &b
}

// The policy names exactly the marks the ledger writes (tenants' constants), matches pod
// creates and updates, status included (a pods/status update can change labels), fails
// closed, and its binding denies.
func TestLedgerMarksPolicyShape(t *testing.T) {
	p, b := ledgerMarksObjects(t)
	if p.Kind != "ValidatingAdmissionPolicy" || p.Name != ledgerMarksName || b.Kind != "ValidatingAdmissionPolicyBinding" || b.Name != ledgerMarksName {
		t.Fatalf("objects %s %s, %s %s", p.Kind, p.Name, b.Kind, b.Name)
	}
	if b.Spec.PolicyName != ledgerMarksName || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) || b.Spec.MatchResources != nil || b.Spec.ParamRef != nil {
		t.Errorf("binding spec %+v: want the policy, Deny, every namespace", b.Spec)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Error("failurePolicy is not Fail")
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 {
		t.Fatalf("resource rules %+v", rules)
	}
	r := rules[0]
	if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"pods", "pods/status"}) ||
		!slices.Equal(r.Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("rule %+v: want CREATE and UPDATE of core pods and pods/status", r)
	}
	var cel []string
	for _, v := range p.Spec.Variables {
		cel = append(cel, v.Expression)
	}
	for _, v := range p.Spec.Validations {
		cel = append(cel, v.Expression)
		for _, w := range []string{tenants.ChargedLabel, tenants.ChargedAmountsAnnotation, "offloadtenants/status in sar-bridge.io"} {
			if !strings.Contains(v.Message, w) {
				t.Errorf("message %q does not name %s", v.Message, w)
			}
		}
		if v.Reason == nil || *v.Reason != "Forbidden" {
			t.Errorf("validation %q: reason %v, want Forbidden", v.Expression, v.Reason)
		}
	}
	all := strings.Join(cel, "\n")
	for _, w := range []string{
		"'" + tenants.ChargedLabel + "'",
		"'" + tenants.ChargedAmountsAnnotation + "'",
		"authorizer.group('sar-bridge.io').resource('offloadtenants').subresource('status').check('update').allowed()",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("the policy's expressions lack %s:\n%s", w, all)
		}
	}
}
