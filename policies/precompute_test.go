package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// precomputeDatas extends variedDatas with more capped groups than the
// fast path tabulates every subset of, ties and negative caps.
func precomputeDatas() map[string]string {
	datas := maps.Clone(variedDatas)
	limits := map[string]any{}
	for i := range 10 {
		limits[fmt.Sprintf("g%d", i)] = map[string]any{"cpu": fmt.Sprint(i%4 + 1), "memory": fmt.Sprintf("%dGi", 4-i%3)}
	}
	limits["system:serviceaccounts:team-a"] = map[string]any{"cpu": "2", "memory": "-1"}
	limits["system:authenticated"] = map[string]any{"cpu": "2000m"}
	b, _ := json.Marshal(map[string]any{"interlink": map[string]any{
		"limits":         limits,
		"default_limits": map[string]any{"cpu": "1"},
		"protected_taints": []any{
			map[string]any{"key": "hpc.example/gpu", "value": "a100", "allowed_groups": []any{"system:authenticated"}},
			map[string]any{"key": "hpc.example/gpu", "value": "a100", "allowed_users": []any{"system:serviceaccount:team-a:runner"}},
		},
	}})
	datas["many-groups"] = string(b)
	// interLink's rules (restricted annotations, images);
	// quotas in the data file (no longer read) refuse every create.
	rules := `{"interlink": {"limits": {"system:serviceaccounts:team-a": {"cpu": "4", "memory": "8Gi"}},
	  "restricted_annotations": {"slurm-job.vk.io/flags": {"groups": ["system:serviceaccounts:team-a", 7]},
	    "slurm-job.vk.io/pre-exec": {"users": ["bob", "system:serviceaccount:team-b:runner"], "groups": "gpu-users"}}}}`
	datas["interlink-rules"] = rules
	datas["unknown-annotation"] = `{"interlink": {"restricted_annotations": {"example.org/x": {"users": ["bob"]}}}}`
	datas["images"] = `{"interlink": {"image_registries": {"*": ["docker.io/library/"], "tenant-a": ["docker.io/library/busybox", "ghcr.io/example", "registry.example.org:5000/"]}}}`
	datas["quota"] = `{"interlink": {"quotas": {"tenant-a": {"pods": 2}}}}`
	datas["bad-quotas"] = `{"interlink": {"quotas": ["tenant-a"]}}`
	// HPC settings (hpc.rego): defaults the fast path adds for inert pods.
	datas["hpc"] = `{"interlink": {"hpc": {"tenants": {
	  "*": {"sbatch_options": ["--time"], "uid_ranges": [[20000, 20999]], "uid": 20000},
	  "tenant-a": {"account": "proj-a", "accounts": ["proj-a2"], "mount_prefixes": ["/scratch/a"], "singularity_options": ["--bind"]},
	  "tenant-x": {"uid": "root"}}}}}`
	// HPC pods as SLURM users send them (rules/hpc/samples): restricted_annotations
	// grants the flags and shell annotations to some subjects, the tenant lists
	// partitions, flavors, runtime options, prefixes and id ranges.
	datas["hpc-site"] = `{"interlink": {"limits": {"system:serviceaccounts:team-a": {"cpu": "8", "memory": "32Gi"}},
	  "protected_taints": [{"key": "hpc.example/gpu", "value": "a100", "allowed_groups": ["system:serviceaccounts:team-a"]}],
	  "restricted_annotations": {"slurm-job.vk.io/flags": {"groups": ["system:serviceaccounts:team-a", "g3"]},
	    "slurm-job.vk.io/pre-exec": {"users": ["bob"]}, "slurm-job.vk.io/mpi-flags": {"groups": ["gpu-users"]},
	    "interlink.eu/wstunnel-client-commands": {"users": ["system:serviceaccount:team-a:runner"]}, "interlink.eu/pod-ip": {"groups": ["g7"]}},
	  "hpc": {"auto_flavors": ["gpu"], "tenants": {"*": {"sbatch_options": ["--time", "--mem-per-cpu"], "partitions": ["cpu"], "qos": ["normal"]},
	    "tenant-a": {"account": "proj-a", "accounts": ["proj-a2"], "partitions": ["cpu", "gpu"], "qos": ["normal"], "flavors": ["gpu", "default"],
	      "mount_prefixes": ["/scratch/a"], "image_roots": ["/scratch/a"], "singularity_options": ["--bind", "--nv"], "enroot_options": ["--mount"],
	      "uid_ranges": [[20000, 20999]], "gid_ranges": [[20000, 20100]], "uid": 20000}}}}}`
	datas["hpc-broken"] = `{"interlink": {"hpc": {"tenants": {"*": {"mount_prefixes": ["scratch"]}}}}}`
	return datas
}

// enforcementData sets rules to warn and audit: they allow with violations, which the
// fast path lists by evaluating those rules. TestPrecomputeMatchesFallback alone
// decides with it (the other users of precomputeDatas expect every allowed input on the
// fast path, and site rules to deny).
const enforcementData = `{"interlink": {"limits": {"system:serviceaccounts:team-a": {"cpu": "2", "memory": "4Gi"}},
  "protected_taints": [{"key": "hpc.example/gpu", "value": "a100", "allowed_groups": ["system:serviceaccounts:team-a"]}],
  "enforcement": {"caps": "warn", "protected-taints": {"default": "audit", "relay": "deny"}, "tenant-isolation": {"default": "warn"},
    "restricted-annotations": "audit", "quota": "warn", "images": "audit", "interlink.authz": "warn", "site.x": "audit"}}}`

// TestPrecomputeMatchesFallback: the policy gives the same documents with
// the precomputed document (and so the fast path) as without it, the way
// the opa CLI or an OPA server evaluates it.
func TestPrecomputeMatchesFallback(t *testing.T) {
	for source, newEv := range evaluatorSources {
		t.Run(source, func(t *testing.T) {
			inputs := append(variedInputs(t), wellFormedInputs(t)...)
			datas := precomputeDatas()
			datas["enforcement"] = enforcementData
			for dname, data := range datas {
				opts := Options{}
				var parsed map[string]any
				if data != "" {
					opts.DataFile = writeFile(t, t.TempDir(), "data.json", data)
					var err error
					if parsed, err = parseData("data.json", []byte(data)); err != nil {
						t.Fatal(err)
					}
				}
				e := newEv(t, opts)
				plain := inmem.NewFromObjectWithOpts(parsed, inmem.OptReturnASTValuesOnRead(true))
				for _, doc := range []string{"decision", "allow", "deny", "violations"} {
					prep := func(store storage.Store) rego.PreparedEvalQuery {
						pq, err := rego.New(
							rego.Query("result = data.interlink.authz."+doc),
							rego.Compiler(e.compiler), rego.Store(store),
						).PrepareForEval(context.Background())
						if err != nil {
							t.Fatal(err)
						}
						return pq
					}
					pre, fallback := prep(e.store), prep(plain)
					for i, in := range inputs {
						if !inCorpus(t, i, source, dname, doc) {
							continue
						}
						got, _ := json.Marshal(evalResult(t, pre, rego.EvalInput(in)))
						want, _ := json.Marshal(evalResult(t, fallback, rego.EvalInput(in)))
						if string(got) != string(want) {
							ij, _ := json.Marshal(in)
							t.Errorf("%s, data %s, input %d %s:\nprecomputed %s\n   fallback %s", doc, dname, i, ij, got, want)
						}
						if doc != "decision" {
							continue
						}
						// As the bridge evaluates it: the shared checks apart (sharedproof.go).
						v, err := ast.InterfaceToValue(in)
						if err != nil {
							t.Fatal(err)
						}
						res, err := e.EvalValue(context.Background(), decisionPath, v, Memo{Salt: []byte(fmt.Sprint(dname, i)), Expires: time.Now().Add(time.Hour)})
						if err != nil {
							t.Fatalf("data %s, input %d: %v", dname, i, err)
						}
						bv, _ := ast.JSON(res.Value)
						if bj, _ := json.Marshal(bv); string(bj) != string(want) {
							ij, _ := json.Marshal(in)
							t.Errorf("decision, data %s, input %d %s:\nas the bridge %s\n    fallback %s", dname, i, ij, bj, want)
						}
					}
				}
			}
		})
	}
}

// wellFormedInputs vary the bench input the way real pods differ, keeping
// every field of the type the bridge sends: the fast path's domain, where
// variedInputs mostly exercise odd types.
func wellFormedInputs(t testing.TB) []any {
	t.Helper()
	// Quantities the bridge's strict Pod decoding lets through (so not "lots").
	quantities := []string{"1", "2", "100m", "1500m", "3", "5", "64Mi", "1Gi", "4Gi", "6Gi", "12Gi", "1e3", "4G", "0.5"}
	memories := []string{"64Mi", "1Gi", "4Gi", "6Gi", "12Gi", "4G", "1e9", "1500Mi"}
	tolerations := []any{
		map[string]any{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
		map[string]any{"key": "hpc.example/gpu", "operator": "Equal", "value": "a100"},
		map[string]any{"key": "hpc.example/gpu", "value": "a100"},
		map[string]any{"key": "hpc.example/gpu", "value": "v100"},
		map[string]any{"key": "hpc.example/reserved", "operator": "Equal", "value": "bigmem"},
		map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
		// Keyless Exists tolerates every taint: refused where taints are protected.
		map[string]any{"operator": "Exists"},
		map[string]any{"key": nil, "operator": "Exists"},
		map[string]any{"key": "", "operator": "Exists", "effect": "NoSchedule"},
		map[string]any{"key": "hpc.example/gpu", "operator": "Exists"},
	}
	images := []any{"busybox:1.36", "docker.io/library/busybox@sha256:" + strings.Repeat("c", 64), "ghcr.io/example/trainer:1.4", "ghcr.io/example2/x",
		"registry.example.org:5000/a/b", "registry.example.org/a", "alpine", "Not A Reference", 7, nil}
	subjects := []any{
		map[string]any{"username": "system:serviceaccount:team-a:runner", "groups": []any{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"}},
		map[string]any{"username": "system:serviceaccount:team-b:runner", "groups": []any{"system:serviceaccounts:team-b", "system:authenticated"}},
		map[string]any{"username": "bob", "groups": []any{"system:authenticated", "gpu-users", "g3", "g7"}},
		map[string]any{"username": "carol", "groups": []any{"g1", "g2", "g9"}},
		map[string]any{"username": "dave", "groups": []any{}},
	}
	var out []any
	for seed := range 150 {
		r := rand.New(rand.NewPCG(uint64(seed), 1919))
		ri := rand.New(rand.NewPCG(uint64(seed), 7)) // images, apart: r draws what it drew before them
		in := benchInput(t)
		b, _ := json.Marshal(in)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		withoutRestrictedAnnotations(m)
		// Restricted annotations, as sent; the data sets of precomputeDatas
		// allow them to some subjects.
		annotations := m["pod"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
		for _, key := range []string{"slurm-job.vk.io/pre-exec", "slurm-job.vk.io/flags"} {
			if r.IntN(4) == 0 {
				annotations[key] = "x"
			}
		}
		// What the HPC side reads (hpc.rego), now and then: as SLURM users write
		// it (flags with values, mounts, uids, flavors, GPUs) and not.
		spec := m["pod"].(map[string]any)["spec"].(map[string]any)
		if r.IntN(3) == 0 {
			switch r.IntN(12) {
			case 0, 1:
				annotations["slurm-job.vk.io/flags"] = []string{"--time=1:00:00", "--account=proj-a2", "--account=proj-b -t 5", "--uid=0", "-Aproj",
					"--cpus-per-task=4 --time=01:00:00 --partition=gpu", "--time=5 --mem-per-cpu=2G", "--job-name='x", "--gid 5", "-p cpu -q normal"}[r.IntN(10)]
			case 2:
				annotations["slurm-job.vk.io/singularity-options"] = []string{"--bind /scratch/a/x:/data", "--bind /:/host", "--nv", "--bind /scratch/ab:/d"}[r.IntN(4)]
			case 3:
				annotations["slurm-job.vk.io/singularity-mounts"] = []string{"--bind /scratch/a/in:/in", "--bind /etc:/etc", "--bind /scratch/a"}[r.IntN(3)]
			case 4:
				annotations["slurm-job.vk.io/flavor"] = []string{"gpu", "default", "bigmem"}[r.IntN(3)]
			case 5:
				spec["volumes"] = []any{map[string]any{"name": "v", "hostPath": map[string]any{"path": []string{"/scratch/a/data", "/scratch/a", "/etc", "scratch/a", "/scratch/a/../b"}[r.IntN(5)]}}}
			case 6:
				annotations[[]string{"slurm-job.vk.io/image-root", "htcondor-job.knoc.io/image-root"}[r.IntN(2)]] = []string{"/scratch/a/img", "/images"}[r.IntN(2)]
			case 7:
				annotations["interlink.eu/pod-ip"] = []string{"10.1.2.3", "fe80::1%eth0", "x; id"}[r.IntN(3)]
			case 8:
				annotations[[]string{"slurm-job.vk.io/mpi-flags", "interlink.eu/wstunnel-client-commands", "slurm-job.vk.io/enroot-mounts"}[r.IntN(3)]] = "/scratch/a/x:/x"
			case 9:
				spec["securityContext"] = map[string]any{"runAsUser": []any{0, 20001, 5, 20999}[r.IntN(4)], "runAsGroup": []any{0, 20001, 5}[r.IntN(3)]}
			case 10:
				spec["securityContext"] = map[string]any{"runAsUser": []any{0, 20001, 5, 20999}[r.IntN(4)]}
			case 11:
				spec["__gpus"] = []string{"1", "2"}[r.IntN(2)]
			}
		}
		gpus, _ := spec["__gpus"].(string)
		delete(spec, "__gpus")
		var cs []any
		for i := range 1 + r.IntN(3) {
			c := map[string]any{"name": fmt.Sprintf("c%d", i), "image": "busybox"}
			if ri.IntN(3) == 0 {
				// Images as pods name them, for the images data set: most under its
				// prefixes, some beside them, some no reference at all.
				c["image"] = images[ri.IntN(len(images))]
			}
			res := map[string]any{}
			for _, kind := range []string{"limits", "requests"} {
				if r.IntN(3) == 0 {
					continue
				}
				q := map[string]any{}
				for _, name := range []string{"cpu", "memory"} {
					if r.IntN(4) > 0 {
						q[name] = quantities[r.IntN(len(quantities))]
					}
				}
				// Memory as pods set it, now and then under 1Mi (a limit the SLURM
				// plugin writes as --mem=0, refused).
				if _, ok := q["memory"]; ok && r.IntN(8) > 0 {
					q["memory"] = memories[r.IntN(len(memories))]
				}
				res[kind] = q
			}
			if gpus != "" && i == 0 {
				limits, _ := res["limits"].(map[string]any)
				if limits == nil {
					limits = map[string]any{}
				}
				limits["nvidia.com/gpu"] = gpus
				res["limits"] = limits
			}
			if i == 0 && r.IntN(8) == 0 {
				c["securityContext"] = map[string]any{"runAsUser": []any{20002, 7}[r.IntN(2)]}
			}
			if r.IntN(5) > 0 || gpus != "" && i == 0 {
				c["resources"] = res
			}
			cs = append(cs, c)
		}
		spec["containers"] = cs
		if r.IntN(3) == 0 {
			init := map[string]any{"name": "init", "resources": map[string]any{"limits": map[string]any{"cpu": quantities[r.IntN(len(quantities))]}}}
			if ri.IntN(2) == 0 {
				init["image"] = images[ri.IntN(len(images))]
			}
			spec["initContainers"] = []any{init}
		}
		ts := []any{}
		for range r.IntN(4) {
			ts = append(ts, tolerations[r.IntN(len(tolerations))])
		}
		spec["tolerations"] = ts
		if r.IntN(4) == 0 {
			delete(spec, "nodeSelector")
		}
		m["subject"] = subjects[r.IntN(len(subjects))]
		out = append(out, bridged(t, m))
	}
	return out
}

// TestFastPathTaken guards the comparison above: it means little if the
// fast path decided nothing. With allow mocked, only the general rules'
// decision would show the mock; every allowed well-formed input must have
// taken the fast path.
func TestFastPathTaken(t *testing.T) {
	for source, newEv := range evaluatorSources {
		t.Run(source, func(t *testing.T) {
			for dname, data := range precomputeDatas() {
				if dname == "odd" || dname == "wrong-types" || dname == "quota" || dname == "unknown-annotation" || dname == "bad-quotas" || dname == "hpc-broken" {
					continue
				}
				opts := Options{}
				if data != "" {
					opts.DataFile = writeFile(t, t.TempDir(), "data.json", data)
				}
				e := newEv(t, opts)
				prep := func(q string) rego.PreparedEvalQuery {
					pq, err := rego.New(rego.Query(q), rego.Compiler(e.compiler), rego.Store(e.store)).PrepareForEval(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					return pq
				}
				mocked := prep(`result = data.interlink.authz.decision with data.interlink.authz.allow as "general"`)
				allow := prep(`result = data.interlink.authz.allow`)
				var allowed, fast, hpc int
				for _, in := range wellFormedInputs(t) {
					if evalResult(t, allow, rego.EvalInput(in)) != true {
						continue
					}
					allowed++
					if d := evalResult(t, mocked, rego.EvalInput(in)).(map[string]any); d["allowed"] == true {
						fast++
						// HPC pods (input.hpc not inert: flags, mounts, uids...) too.
						if in.(map[string]any)["hpc"].(map[string]any)["inert"] != true {
							hpc++
						}
					} else if dname != "many-groups" {
						ij, _ := json.Marshal(in)
						t.Errorf("data %s: allowed input took the general rules: %s", dname, ij)
					}
				}
				// many-groups names more groups than every subset is tabulated for: a
				// subject in two of them takes the general rules.
				minAllowed, minFast := 8, 8
				if dname == "many-groups" {
					minAllowed, minFast = 5, 3
				}
				if allowed < minAllowed || fast < minFast {
					t.Errorf("data %s: %d well-formed inputs allowed, %d by the fast path", dname, allowed, fast)
				}
				if dname == "hpc-site" && hpc < 5 {
					t.Errorf("data %s: %d HPC pods (input.hpc not inert) allowed by the fast path, want at least 5", dname, hpc)
				}
				t.Logf("data %s: %d well-formed inputs allowed, %d by the fast path (%d of them HPC pods)", dname, allowed, fast, hpc)
			}
		})
	}
}

func TestPrecomputeStoredAtLoad(t *testing.T) {
	e := newEvaluator(t, Options{DataFile: writeFile(t, t.TempDir(), "data.json", benchData)})
	ctx := context.Background()
	stored, ok, err := e.Eval(ctx, []string{"sar_bridge", "precomputed", "interlink", "authz"}, nil)
	if err != nil || !ok {
		t.Fatalf("stored precomputed document: %v, %v, %v", stored, ok, err)
	}
	computed, ok, err := e.Eval(ctx, []string{"interlink", "authz", "_precompute"}, nil)
	if err != nil || !ok {
		t.Fatalf("_precompute: %v, %v, %v", computed, ok, err)
	}
	if !reflect.DeepEqual(stored, computed) {
		t.Errorf("stored %v\nwant %v", stored, computed)
	}
	caps := stored.(map[string]any)["caps"].(map[string]any)["cpu"].([]any)
	if top := caps[0].(map[string]any); top["group"] != "gpu-users" || top["raw"] != "64" {
		t.Errorf("largest cpu cap = %v", top)
	}
}

func TestPrecomputeRejected(t *testing.T) {
	for name, tc := range map[string]struct{ policy, data, want string }{
		"reads input": {
			policy: "package p\n\n_precompute := {\"x\": helper}\n\nhelper := input.x\n",
			want:   "must depend on data only: reads input.x",
		},
		"nondeterministic": {
			policy: "package p\n\n_precompute := {\"t\": time.now_ns()}\n",
			want:   "calls nondeterministic time.now_ns",
		},
		"reads precomputed": {
			policy: "package p\n\n_precompute := {\"x\": data.sar_bridge.precomputed.q}\n",
			want:   "reads data.sar_bridge.precomputed.q",
		},
		"set": {
			policy: "package p\n\n_precompute := {\"s\": {1, 2}}\n",
			want:   "value is not JSON: set",
		},
		"reserved data": {
			policy: "package p\n\n_precompute := {}\n",
			data:   `{"sar_bridge": {"precomputed": {}}}`,
			want:   "data must not define data.sar_bridge.precomputed",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "p.rego", tc.policy)
			opts := Options{Dir: dir}
			if tc.data != "" {
				opts.DataFile = writeFile(t, t.TempDir(), "data.json", tc.data)
			}
			_, err := New(context.Background(), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPrecomputeOtherPackage(t *testing.T) {
	// The convention is not tied to the default policy.
	dir := t.TempDir()
	writeFile(t, dir, "p.rego", `package team.quota

_precompute := {"total": sum([q | some q in data.quotas])}

_static := s if {
	s := data.sar_bridge.precomputed.team.quota
} else := _precompute

total := _static.total
`)
	e := newEvaluator(t, Options{Dir: dir, DataFile: writeFile(t, t.TempDir(), "data.json", `{"quotas": {"a": 2, "b": 3}}`)})
	v, ok, err := e.Eval(context.Background(), []string{"sar_bridge", "precomputed", "team", "quota", "total"}, nil)
	if err != nil || !ok || fmt.Sprint(v) != "5" {
		t.Fatalf("stored total = %v, %v, %v", v, ok, err)
	}
}

func TestPrecomputeFollowsReload(t *testing.T) {
	limits := func(cpu string) string {
		return "interlink:\n  limits:\n    system:serviceaccounts:team-a:\n      cpu: \"" + cpu + "\"\n"
	}
	f := newReloadFixture(t, nil, limits("4"))
	raw := func() any {
		t.Helper()
		v := f.eval(t, "sar_bridge", "precomputed", "interlink", "authz", "caps", "cpu")
		return v.([]any)[0].(map[string]any)["raw"]
	}
	if got := raw(); got != "4" {
		t.Fatalf("cpu cap = %v, want 4", got)
	}
	replaceFile(t, filepath.Dir(f.data), "data.yaml", limits("1500m"))
	f.waitGeneration(t, 1)
	if got := raw(); got != "1500m" {
		t.Fatalf("cpu cap after a data reload = %v, want 1500m", got)
	}
}
