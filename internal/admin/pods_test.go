package admin

import (
	"strings"
	"testing"
)

const template = `
  template:
    metadata:
      labels: {app: x}
    spec:
      serviceAccountName: runner
      containers: [{name: main, image: busybox}]`

func TestReadPods(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		namespace string
		explicit  bool
		want      []string // source namespace/name serviceAccount
		err       string
	}{
		{name: "pod", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {serviceAccountName: sa, containers: [{name: c, image: i}]}\n",
			want: []string{"pod/p ns/p sa"}},
		{name: "job in the default namespace", in: "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:" + template, namespace: "dflt",
			want: []string{"job/j dflt/j runner"}},
		{name: "cronjob", in: "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c, namespace: ns}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:" + strings.ReplaceAll(template, "\n", "\n    "),
			want: []string{"cronjob/c ns/c runner"}},
		{name: "apps workloads and a comment-only document", in: strings.Join([]string{
			"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\nspec:" + template,
			"# nothing here\n",
			"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s, namespace: ns}\nspec:" + template,
			"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds, namespace: ns}\nspec:" + template,
			"apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: rs, namespace: ns}\nspec:" + template,
		}, "\n---\n"),
			want: []string{"deployment/d ns/d runner", "statefulset/s ns/s runner", "daemonset/ds ns/ds runner", "replicaset/rs ns/rs runner"}},
		{name: "json list", in: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`,
			namespace: "n", want: []string{"pod/a n/a "}},
		{name: "explicit namespace agrees", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c, image: i}]}\n",
			namespace: "ns", explicit: true, want: []string{"pod/p ns/p "}},
		{name: "explicit namespace disagrees", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c, image: i}]}\n",
			namespace: "other", explicit: true, err: `document 1: pod/p: the namespace from the object ("ns") does not match --namespace "other"`},
		{name: "no pod template", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
			err: "document 1: ConfigMap v1 has no pod template: want a Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet"},
		{name: "unknown field", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}], nodeSelecter: {a: b}}\n",
			err: `document 1: decoding: strict decoding error: unknown field "spec.nodeSelecter"`},
		{name: "empty", in: "# only a comment\n", err: "no objects found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := ReadPods(strings.NewReader(tc.in), tc.namespace, tc.explicit)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pods {
				got = append(got, p.Source+" "+p.Pod.Namespace+"/"+p.Pod.Name+" "+p.Pod.Spec.ServiceAccountName)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
