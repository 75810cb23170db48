package strictjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sjson "sigs.k8s.io/json"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

var podType = func() *Type {
	t, err := For(reflect.TypeFor[corev1.Pod]())
	if err != nil {
		panic(err)
	}
	return t
}()

// strictDecode is what Check stands in for: Kubernetes' strict decoding into a Pod.
func strictDecode(data []byte) error {
	strictErrs, err := k8sjson.UnmarshalStrict(data, &corev1.Pod{}, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// podChecks are pods (valid or not) whose verdicts Check must share with strictDecode;
// want is a part of Check's error, "" for a valid pod.
var podChecks = []struct{ name, pod, want string }{
	{"empty", `{}`, ""},
	{"interLink job pod", `{"apiVersion": "v1", "kind": "Pod",
		"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}, "annotations": {"c": "d"},
			"creationTimestamp": "2026-11-24T05:00:00Z", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "x", "controller": true}],
			"managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
		"spec": {"serviceAccountName": "sa", "nodeName": "vk", "restartPolicy": "Never", "nodeSelector": {"k": "v"},
			"terminationGracePeriodSeconds": 30, "priority": -5, "activeDeadlineSeconds": null,
			"containers": [{"name": "main", "image": "i", "command": ["a"], "env": [{"name": "E", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
				"ports": [{"containerPort": 8080, "protocol": "TCP"}],
				"livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 10},
				"readinessProbe": {"tcpSocket": {"port": 8080}},
				"resources": {"requests": {"cpu": "500m", "memory": 268435456}, "limits": {"nvidia.com/gpu": "1"}}}],
			"volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}, {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}}],
			"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
			"securityContext": {"runAsUser": 1000, "sysctls": [{"name": "a", "value": "b"}]}},
		"status": {"phase": "Pending", "startTime": "2026-11-24T05:00:00Z", "podIPs": [{"ip": "10.0.0.1"}]}}`, ""},
	{"nulls everywhere", `{"metadata": null, "spec": {"containers": null, "nodeSelector": null, "priority": null, "overhead": {"cpu": null},
		"tolerations": [null, {"key": null}]}, "status": {"startTime": null}}`, ""},
	{"unknown top-level field", `{"metadata": {}, "Spec": {}}`, `unknown field "Spec"`},
	{"unknown spec field", `{"spec": {"bogus": 1}}`, `unknown field "spec.bogus"`},
	{"unknown field in a list", `{"spec": {"containers": [{"name": "a"}, {"name": "b", "Image": "x"}]}}`, `unknown field "spec.containers[1].Image"`},
	{"unknown field under a map", `{"spec": {"overhead": {"cpu": "1"}, "containers": [{"resources": {"claims": [{"name": "c", "x": 1}]}}]}}`, `unknown field "spec.containers[0].resources.claims[0].x"`},
	{"operator folded", `{"spec": {"tolerations": [{"key": "gpu", "ſperator": "Exists"}]}}`, `unknown field "spec.tolerations[0].ſperator"`},
	{"inline type meta spelt otherwise", `{"Kind": "Pod"}`, `unknown field "Kind"`},
	{"inline volume source", `{"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/"}, "hostpath": {}}]}}`, `unknown field "spec.volumes[0].hostpath"`},
	{"number for a string", `{"metadata": {"namespace": 7}}`, `cannot unmarshal number into field "metadata.namespace"`},
	{"string for a number", `{"spec": {"priority": "5"}}`, `cannot unmarshal string into field "spec.priority"`},
	{"object for a list", `{"spec": {"containers": {"name": "a"}}}`, `cannot unmarshal object into field "spec.containers"`},
	{"list for a map", `{"spec": {"nodeSelector": ["a"]}}`, `cannot unmarshal array into field "spec.nodeSelector"`},
	{"bool for a string", `{"spec": {"nodeName": true}}`, `cannot unmarshal bool`},
	{"string for a bool", `{"spec": {"hostNetwork": "true"}}`, `cannot unmarshal string`},
	{"fraction for an integer", `{"spec": {"priority": 1.5}}`, `cannot unmarshal number 1.5`},
	{"exponent for an integer", `{"spec": {"priority": 1e3}}`, `cannot unmarshal number 1e3`},
	{"int32 overflow", `{"spec": {"priority": 2147483648}}`, `cannot unmarshal number 2147483648`},
	{"int32 limit", `{"spec": {"priority": -2147483648}}`, ""},
	{"int64 overflow", `{"spec": {"terminationGracePeriodSeconds": 9223372036854775808}}`, `cannot unmarshal number`},
	{"negative zero", `{"spec": {"priority": -0}}`, ""},
	{"bad quantity", `{"spec": {"containers": [{"resources": {"limits": {"cpu": "lots"}}}]}}`, `field "spec.containers[0].resources.limits.cpu"`},
	{"quantity as object", `{"spec": {"overhead": {"cpu": {}}}}`, `field "spec.overhead.cpu"`},
	{"quantity pointer null", `{"spec": {"volumes": [{"name": "v", "emptyDir": {"sizeLimit": null}}]}}`, ""},
	{"bad time", `{"metadata": {"creationTimestamp": "yesterday"}}`, `field "metadata.creationTimestamp"`},
	{"bad int-or-string", `{"spec": {"containers": [{"readinessProbe": {"tcpSocket": {"port": true}}}]}}`, `field "spec.containers[0].readinessProbe.tcpSocket.port"`},
	{"fieldsV1 kept as sent", `{"metadata": {"managedFields": [{"fieldsV1": "x"}]}}`, ""},
	{"escaped field name", `{"sp\u0065c": {"nodeName": "n"}}`, ""},
}

func TestCheckMatchesStrictDecoding(t *testing.T) {
	for _, tt := range podChecks {
		t.Run(tt.name, func(t *testing.T) {
			want := strictDecode([]byte(tt.pod))
			if (want == nil) != (tt.want == "") {
				t.Fatalf("the case is wrong: strict decoding says %v", want)
			}
			v, _, err := astjson.DecodeObject([]byte(tt.pod), nil)
			if err != nil {
				t.Fatal(err)
			}
			got := podType.Check(v)
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("refused a pod strict decoding accepts: %v", got)
			case tt.want != "" && (got == nil || !strings.Contains(got.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q (strict decoding: %v)", got, tt.want, want)
			}
		})
	}
}

func TestCheckSkip(t *testing.T) {
	v, _, err := astjson.DecodeObject([]byte(`{"metadata": {"name": "p"}, "spec": {"bogus": 1}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := podType.Check(v, "spec"); err != nil {
		t.Fatalf("checked a skipped member: %v", err)
	}
	v, _, _ = astjson.DecodeObject([]byte(`{"metadata": {"name": 1}, "spec": {}}`), nil)
	if err := podType.Check(v, "spec"); err == nil {
		t.Fatal("skipped a member not named")
	}
}

type withString struct {
	N int `json:"n,string"`
}

type embeddedA struct{ X string }
type embeddedB struct{ X string }
type ambiguous struct {
	embeddedA
	embeddedB
}

type tree struct {
	Children []tree `json:"children"`
}

func TestFor(t *testing.T) {
	for _, tt := range []struct {
		name string
		typ  reflect.Type
		want string // "" when supported
	}{
		{"pod", reflect.TypeFor[corev1.Pod](), ""},
		{"recursive", reflect.TypeFor[tree](), ""},
		{",string", reflect.TypeFor[withString](), "not supported"},
		{"int keys", reflect.TypeFor[map[int]string](), "not supported"},
		{"Go array", reflect.TypeFor[[2]string](), "not supported"},
		{"interface with methods", reflect.TypeFor[error](), "not supported"},
		{"ambiguous promotion", reflect.TypeFor[ambiguous](), "ambiguous"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := For(tt.typ)
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzCheck: on any document the decoder accepts, Check and strict decoding into a Pod
// agree on whether it is a valid Pod.
func FuzzCheck(f *testing.F) {
	for _, tt := range podChecks {
		f.Add([]byte(tt.pod))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, _, err := astjson.DecodeObject(data, nil)
		if err != nil {
			return
		}
		got, want := podType.Check(v), strictDecode(data)
		if (got == nil) != (want == nil) {
			t.Fatalf("Check: %v; strict decoding: %v", got, want)
		}
	})
}

type named struct {
	TypeMeta `json:",inline"`
	Spec     *namedSpec      `json:"spec"`
	Items    []tree          `json:"items"`
	ByKey    map[string]tree `json:"byKey"`
	Skipped  string          `json:"-"`
	Untagged int
}

type TypeMeta struct {
	Kind string `json:"kind"`
}

type namedSpec struct {
	Name string `json:"name,omitempty"`
}

func TestNames(t *testing.T) {
	typ, err := For(reflect.TypeFor[named]())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Untagged", "byKey", "children", "items", "kind", "name", "spec"}
	if got := typ.Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
