package authorizer

import (
	"fmt"
	"strings"
)

// InputMember is one member of the input a pod decision's policy sees.
type InputMember struct {
	Name string
	// FromCaller: the caller's member, kept as sent (decoded strictly); otherwise the
	// bridge sets it, replacing a caller's member of the same name.
	FromCaller bool
	Doc        string
}

// InputSchema is every member of a pod decision's input, in the order decidePod builds
// them: the schema docs/reference/input.md shows (TestDocsShowTheInputSchema) and the
// decisions build (TestInputSchemaIsWhatDecisionsBuild).
var InputSchema = []InputMember{
	{"operation", true, "`create`, `delete` or `status` (`create` when the caller sent none)"},
	{"pod", true, "the Pod as sent (unknown or mis-cased fields are refused with a 400)"},
	{"user", true, "as sent: the identity a trusted caller asserts; read `subject` instead"},
	{"subject", false, "`{username, uid, groups, extra}`: whose rights were reviewed — the pod's service account (groups `system:serviceaccounts`, `system:serviceaccounts:<ns>`, `system:authenticated`), `input.user` when the caller may impersonate it, or the requesting user for the webhooks (`--admission.identity`)"},
	{"front_door", false, "the way the request came in: `relay` (interLink's plugin relay), `admission` (the webhooks) or `data_api` (the Data API, and `sar-bridge check`); each rule's action may differ per front door ([Enforcement actions](../policies.md#enforcement-actions-deny-warn-audit))"},
	{"tenant", false, "the OffloadTenant that lists the namespace, else the namespace's `--tenant.label` value, else the namespace name"},
	{"tenant_label", false, "`--tenant.label`"},
	{"group", false, "the tenant's API group, `null` when unmapped"},
	{"namespace", false, "`{name, labels, annotations}` from the informer (empty maps for an unknown namespace)"},
	{"node", false, "`null` without a target node (the caller's `input.node.name`, else `pod.spec.nodeName`); else `{name, found, labels, taints: [{key, value, effect}], allocatable: {resource: quantity string}}` from the informer, `found: false` with empty maps when the cluster has no such node"},
	{"review", false, "`{allowed, denied, reason, attributes: [{namespace, verb, group, resource, name}]}`: the SubjectAccessReviews (every one must allow; `name` is empty on a create), or, with no review sent (unmapped tenant), `allowed: false` and the reason"},
	{"resources", false, "the pod's amounts as numbers, parsed as `units.parse` does: `{\"containers\": [{\"name\", \"limits\": {res: n}, \"requests\": {res: n}}, …], \"largest\": {res: n}, \"unlimited\": [name, …]}`, containers then init containers (`name` `\"\"` when not a string); `largest` is per resource the largest limit, or request where a container sets no limit; `unlimited` names, once each and in that order, the containers with a non-empty name that set no limits (absent, `null` or `{}`); `null` when an amount is not a quantity string of the default policy's grammar (`policies/resources.go`)"},
	{"tolerations", false, "the pod's tolerations by key, as taints match them: `{\"equal\": {key: {value: true}}, \"other\": {key: true}, \"keyless_exists\": n}`; `equal` holds the tolerations with a string key and operator `Equal` (or absent, empty or not a string: Kubernetes' default), `value` `\"\"` when absent or not a string; `other` the keys with any other operator (`Exists`, or one Kubernetes does not know); `keyless_exists` counts the `Exists` tolerations without a key (absent, empty or not a string), which tolerate every taint; `null` when the pod or its spec is not an object or `spec.tolerations` is neither a list nor null (`policies/tolerations.go`)"},
	{"images", false, "the repository each container's image names, normalised as container runtimes do (`busybox:1.36` is `docker.io/library/busybox`; a tag or digest dropped): `[{\"kind\", \"name\", \"repository\"}, …]`, containers, then init containers, then ephemeral containers, `kind` `container`, `init container` or `ephemeral container`, `name` `\"\"` when not a string, `repository` `null` when the image is absent or not an image reference; `null` when the pod or its spec is not an object or a container list is neither a list nor null (`policies/images.go`)"},
	{"hpc", false, "what interLink's plugins would make of the pod (`policies/hpc.go`): `{\"inert\", \"sbatch_only\", \"sbatch\": {\"options\": {name: value or true}, \"order\", \"error\"}, \"runtime\": {annotation: {\"options\", \"error\"}}, \"host_paths\": [{\"path\", \"from\"}], \"ids\": [{\"field\", \"kind\", \"value\"}], \"words\": [{\"what\", \"error\"}], \"pod_ip\": {\"valid\", \"error\"}, \"host_mode\", \"gpus\", \"flavor_sized\", \"script_bound\": {plugin: [{\"field\", \"row\", \"message\"}]}, \"bound_plugins\", \"writers\": {annotation: \"vk\" or \"other\"}}`; `inert` when the pod sets none of it, `sbatch_only` when it sets nothing but sbatch options; `script_bound` lists, per plugin, the strings that would reach its job script unquoted and break the inert-by-default table ([HPC rules](../hpc.md)), `bound_plugins` the plugins with any; `writers` for the relay and the Data API (see [mesh networking](../install/README.md#interlinks-mesh-networking)); while the default policy is evaluated, `proved` is true where the bridge proved apart the fast path's checks the pods of a job share (`_fast_shared_proof`: tolerations, tenant isolation, images, HPC; remembered like a decision; a caller's is removed)"},
	{"quota", false, "the tenant's ledger and quota, for creates the review allowed of a tenant with an OffloadTenant `spec.hard` (see [Tenant offload quotas](../tenants.md#tenant-offload-quotas)); `null` in place of a caller's `quota`, never believed"},
}

// InputSchemaMarkdown is InputSchema as the table of docs/reference/input.md.
func InputSchemaMarkdown() string {
	var b strings.Builder
	b.WriteString("| field | set by | value |\n| --- | --- | --- |\n")
	for _, m := range InputSchema {
		by := "the bridge"
		if m.FromCaller {
			by = "the caller"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m.Name, by, m.Doc)
	}
	return b.String()
}
