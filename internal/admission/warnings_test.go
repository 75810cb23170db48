package admission

import (
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// withViolations is a decision result with violations as [rule, message, action].
func withViolations(result map[string]any, vs ...[3]string) map[string]any {
	list := make([]any, 0, len(vs))
	for _, v := range vs {
		list = append(list, map[string]any{"rule": v[0], "message": v[1], "action": v[2]})
	}
	result["violations"] = list
	return result
}

// TestWarnings: the validating webhook answers each violation in warn as an admission
// warning (kubectl prints them), none for audit or on a refusal, and the mutating
// webhook none (the same pod is warned about once); every decision is asked as the
// admission front door.
func TestWarnings(t *testing.T) {
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	podReq := func(t *testing.T) *admissionv1.AdmissionRequest {
		return newRequest(t, admissionv1.Create, "", onVirtual, nil)
	}
	const capsMsg = `container "main" sets cpu limit 16 over the cap 8 for group "g"`
	for _, tc := range []struct {
		name     string
		path     string
		req      func(t *testing.T) *admissionv1.AdmissionRequest
		result   map[string]any
		allowed  bool
		warnings []string
	}{
		{"warn", ValidatePath, podReq, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "warn"}),
			true, []string{"sar-bridge: caps (warn): " + capsMsg}},
		{"warn and audit", ValidatePath, podReq, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "warn"}, [3]string{"images", "unlisted", "audit"}, [3]string{"site.gpu", "no project", "warn"}),
			true, []string{"sar-bridge: caps (warn): " + capsMsg, "sar-bridge: site.gpu (warn): no project"}},
		{"audit only", ValidatePath, podReq, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "audit"}),
			true, nil},
		{"none", ValidatePath, podReq, withViolations(allowResult(nil, nil)), true, nil},
		{"refused with a warn beside", ValidatePath, podReq, withViolations(denyResult("no"), [3]string{"caps", capsMsg, "warn"}, [3]string{"tenant-isolation", "no", "deny"}),
			false, nil},
		{"dry run", ValidatePath, func(t *testing.T) *admissionv1.AdmissionRequest {
			r := podReq(t)
			r.DryRun = ptr.To(true)
			return r
		}, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "warn"}),
			true, []string{dryRunWarning, "sar-bridge: caps (warn): " + capsMsg}},
		{"workload", ValidatePath, func(t *testing.T) *admissionv1.AdmissionRequest {
			return workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
		}, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "warn"}),
			true, []string{"sar-bridge: pod template of job/pi: caps (warn): " + capsMsg}},
		{"mutate says nothing", MutatePath, podReq, withViolations(allowResult(nil, nil), [3]string{"caps", capsMsg, "warn"}),
			true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDecider{result: tc.result}
			status, resp, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), tc.path, tc.req(t))
			if status != 200 || resp.Allowed != tc.allowed {
				t.Fatalf("HTTP %d allowed %v, want 200 %v: %s", status, resp.Allowed, tc.allowed, body)
			}
			if !reflect.DeepEqual(resp.Warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", resp.Warnings, tc.warnings)
			}
			if len(d.calls) != 1 || d.calls[0].frontDoor != authorizer.FrontDoorAdmission {
				t.Errorf("decisions %+v, want one as the admission front door", d.calls)
			}
		})
	}
}
