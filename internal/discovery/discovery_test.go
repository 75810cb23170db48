package discovery

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

func TestValidateGroup(t *testing.T) {
	for _, tc := range []struct {
		group, err string
	}{
		{"interlink.io", ""},
		{"tenant-b.interlink.io", ""},
		{"interlink", `group "interlink" is not a valid API group for a CustomResourceDefinition: it needs at least one dot (e.g. interlink.io)`},
		{"Interlink.io", `group "Interlink.io" is not a valid API group: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"", `group "" is not a valid API group: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{strings.Repeat("a", 229) + ".io", ""},
		{strings.Repeat("a", 230) + ".io", `group "` + strings.Repeat("a", 230) + `.io" is too long: the policy name sar-bridge-discovery.` + strings.Repeat("a", 230) + `.io would be 254 characters, at most 253 are allowed`},
	} {
		t.Run(tc.group, func(t *testing.T) {
			err := ValidateGroup(tc.group)
			if got := errString(err); got != tc.err {
				t.Errorf("ValidateGroup(%q) = %q, want %q", tc.group, got, tc.err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Objects: four a group, groups sorted and once, every object of the API's own shape.
func TestObjects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []string
		want   []string // kind name
		err    string
	}{
		{name: "one group", groups: []string{"interlink.io"}, want: []string{
			"CustomResourceDefinition pods.interlink.io",
			"CustomResourceDefinition nodes.interlink.io",
			"ValidatingAdmissionPolicy sar-bridge-discovery.interlink.io",
			"ValidatingAdmissionPolicyBinding sar-bridge-discovery.interlink.io",
		}},
		{name: "sorted, duplicates once", groups: []string{"tenant-b.interlink.io", "interlink.io", "tenant-b.interlink.io"}, want: []string{
			"CustomResourceDefinition pods.interlink.io",
			"CustomResourceDefinition nodes.interlink.io",
			"ValidatingAdmissionPolicy sar-bridge-discovery.interlink.io",
			"ValidatingAdmissionPolicyBinding sar-bridge-discovery.interlink.io",
			"CustomResourceDefinition pods.tenant-b.interlink.io",
			"CustomResourceDefinition nodes.tenant-b.interlink.io",
			"ValidatingAdmissionPolicy sar-bridge-discovery.tenant-b.interlink.io",
			"ValidatingAdmissionPolicyBinding sar-bridge-discovery.tenant-b.interlink.io",
		}},
		{name: "none", err: "no API group"},
		{name: "every bad group named", groups: []string{"a", "interlink.io", "b"}, err: `group "a" is not a valid API group for a CustomResourceDefinition: it needs at least one dot (e.g. interlink.io)
group "b" is not a valid API group for a CustomResourceDefinition: it needs at least one dot (e.g. interlink.io)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Objects(tc.groups)
			if got := errString(err); got != tc.err {
				t.Fatalf("error %q, want %q", got, tc.err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o["kind"].(string)+" "+o["metadata"].(map[string]any)["name"].(string))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The policy and its binding decode strictly into the API's types (no misspelt field),
// refuse CREATE and UPDATE of both resources of the group only, and deny.
func TestPolicyShape(t *testing.T) {
	objs, err := Objects([]string{"interlink.io"})
	if err != nil {
		t.Fatal(err)
	}
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	strict(t, objs[2], &vap)
	var vapb admissionregistrationv1.ValidatingAdmissionPolicyBinding
	strict(t, objs[3], &vapb)
	rules := vap.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 {
		t.Fatalf("rules %+v", rules)
	}
	r := rules[0]
	if got := strings.Join(r.APIGroups, ",") + " " + strings.Join(r.Resources, ",") + " " + strings.Join(r.APIVersions, ","); got != "interlink.io pods,nodes *" {
		t.Errorf("rule matches %q", got)
	}
	if len(r.Operations) != 2 || r.Operations[0] != admissionregistrationv1.Create || r.Operations[1] != admissionregistrationv1.Update {
		t.Errorf("operations %q", r.Operations)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", vap.Spec.FailurePolicy)
	}
	if len(vap.Spec.Validations) != 1 || vap.Spec.Validations[0].Expression != "false" || vap.Spec.Validations[0].Message != Message("interlink.io") {
		t.Errorf("validations %+v", vap.Spec.Validations)
	}
	if vapb.Spec.PolicyName != vap.Name || len(vapb.Spec.ValidationActions) != 1 || vapb.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Errorf("binding %+v does not deny with %s", vapb.Spec, vap.Name)
	}
	if vapb.Spec.MatchResources != nil {
		t.Errorf("binding narrows the policy: %+v", vapb.Spec.MatchResources)
	}
}

func strict(t *testing.T, o map[string]any, into any) {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", o["kind"], err)
	}
}

// YAML is the objects, one document each, in order.
func TestYAML(t *testing.T) {
	out, err := YAML([]string{"interlink.io"})
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "---\n")
	if docs[0] != "" || len(docs) != 5 {
		t.Fatalf("want 4 documents each after ---, got:\n%s", out)
	}
	objs, _ := Objects([]string{"interlink.io"})
	for i, d := range docs[1:] {
		var got map[string]any
		if err := yaml.Unmarshal([]byte(d), &got); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(objs[i])
		if string(a) != string(b) {
			t.Errorf("document %d:\n%s\nwant\n%s", i, a, b)
		}
	}
}
