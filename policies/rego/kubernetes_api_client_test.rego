# Tests of the opa-kubernetes-api-client compatibility package, with the cluster
# built-ins mocked. The opa CLI does not know k8s.get and k8s.list, so
# `make rego-test` skips this file; `go test ./policies/` runs it.
package kubernetes.api.client_test

import data.kubernetes.api.client

_objects := [
	{"kind": "Deployment", "metadata": {"namespace": "default", "name": "web", "labels": {"app": "web", "owner": "team-a"}}},
	{"kind": "Deployment", "metadata": {"namespace": "default", "name": "db", "labels": {"app": "db"}}},
	{"kind": "Deployment", "metadata": {"namespace": "other", "name": "web", "labels": {"app": "web"}}},
]

_get(_, namespace, name) := obj if {
	some obj in _objects
	obj.metadata.namespace == namespace
	obj.metadata.name == name
}

# Matches {"matchLabels": {...}} and "k=v" selectors, enough for these tests.
_matches(_, selector) if selector == ""

_matches(obj, selector) if {
	is_string(selector)
	[k, v] := split(selector, "=")
	obj.metadata.labels[k] == v
}

_matches(obj, selector) if {
	is_object(selector)
	every k, v in selector.matchLabels {
		obj.metadata.labels[k] == v
	}
}

_list(_, namespace, selector) := [obj |
	some obj in _objects
	namespace in {"", obj.metadata.namespace}
	_matches(obj, selector)
]

_names(resp) := [sprintf("%s/%s", [o.metadata.namespace, o.metadata.name]) | some o in resp.body.items]

test_query_name_ns_found if {
	resp := client.query_name_ns("deployments", "web", "default") with k8s.get as _get
	resp.status_code == 200
	resp.body.metadata.labels.owner == "team-a"
	resp.metadata.labels.owner == "team-a"
}

test_query_name_ns_absent if {
	resp := client.query_name_ns("deployments", "cache", "default") with k8s.get as _get
	resp.status_code == 404
	resp.body.reason == "NotFound"
	resp.body.code == 404
	resp.body.details == {"name": "cache", "kind": "deployments"}
	not resp.metadata
}

test_query_label_selector_ns_map if {
	resp := client.query_label_selector_ns("deployments", {"app": "web"}, "default") with k8s.list as _list
	resp.status_code == 200
	_names(resp) == ["default/web"]
}

test_query_label_selector_ns_string if {
	resp := client.query_label_selector_ns("deployments", "app=web", "other") with k8s.list as _list
	_names(resp) == ["other/web"]
}

test_query_label_selector_ns_label_selector_object if {
	resp := client.query_label_selector_ns("deployments", {"matchLabels": {"app": "db"}}, "default") with k8s.list as _list
	_names(resp) == ["default/db"]
}

test_query_label_selector_ns_none if {
	resp := client.query_label_selector_ns("deployments", {"app": "cache"}, "default") with k8s.list as _list
	resp.status_code == 200
	resp.body.items == []
}

test_query_all if {
	resp := client.query_all("deployments") with k8s.list as _list
	resp.status_code == 200
	resp.body.kind == "List"
	_names(resp) == ["default/web", "default/db", "other/web"]
}
