# Compatibility with the opa-kubernetes-api-client library: its three functions,
# answered from sar-bridge's informer caches (the k8s.get and k8s.list built-ins)
# instead of one http.send to the API server per call, so policies written for
# the library run unchanged. The resources they name must be in
# --cluster.resources; a policy calling them is never memoised.
#
# Answers have the shape of the library's (an http.send response): status_code
# and body, the body being what the API server would send (the object; a list
# with items; a NotFound Status with a 404).
package kubernetes.api.client

# query_name_ns is the object resource/name in namespace. A 200 answer also
# carries the object's own fields at its top level (no Kubernetes object has a
# body or status_code field), so a policy that reads them there, as the
# library's README example does, sees them too.
query_name_ns(resource, name, namespace) := object.union(obj, {"status_code": 200, "body": obj}) if {
	obj := k8s.get(resource, namespace, name)
} else := {"status_code": 404, "body": _not_found(resource, name)}

# query_label_selector_ns lists the objects of resource in namespace whose labels
# match selector: an object of label values (the library's form), or a
# selector string or LabelSelector object as k8s.list takes.
query_label_selector_ns(resource, selector, namespace) := {
	"status_code": 200,
	"body": _list(k8s.list(resource, namespace, _selector(selector))),
}

# query_all lists every object of resource, in every namespace.
query_all(resource) := {"status_code": 200, "body": _list(k8s.list(resource, "", ""))}

_selector(s) := s if is_string(s)

_selector(s) := s if {
	is_object(s)
	_label_selector_object(s)
}

_selector(s) := {"matchLabels": s} if {
	is_object(s)
	not _label_selector_object(s)
}

_label_selector_object(s) if {
	count(s) > 0
	every k, _ in s {
		k in {"matchLabels", "matchExpressions"}
	}
}

_list(items) := {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}

_not_found(resource, name) := {
	"kind": "Status",
	"apiVersion": "v1",
	"metadata": {},
	"status": "Failure",
	"message": sprintf("%s %q not found", [resource, name]),
	"reason": "NotFound",
	"details": {"name": name, "kind": resource},
	"code": 404,
}
