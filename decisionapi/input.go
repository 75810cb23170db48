package decisionapi

import "encoding/json"

// Input is the input of a pod decision as every caller sends it: the relay, the
// admission webhooks, `sar-bridge check` and the Go client. The bridge derives the rest
// of the policy's input from it (the review, the namespace, the node, input.hpc…).
type Input struct {
	// Operation is create, delete or status; empty is a create.
	Operation string `json:"operation,omitempty"`
	// Pod is the pod decided: a *corev1.Pod, or its JSON as received.
	Pod any `json:"pod"`
	// Node names the target virtual node; nil: the pod's spec.nodeName.
	Node *NodeRef `json:"node,omitempty"`
	// User is the requesting user: honoured only when the caller may impersonate it.
	// Nil: the pod's service account.
	User *User `json:"user,omitempty"`
}

// NodeRef names a node.
type NodeRef struct {
	Name string `json:"name"`
}

// OnNode is a reference to the node name, or nil when name is empty.
func OnNode(name string) *NodeRef {
	if name == "" {
		return nil
	}
	return &NodeRef{Name: name}
}

// User is an identity asserted by a trusted caller (input.user).
type User struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// Marshal is the input as the Data API's input member.
func (in Input) Marshal() (json.RawMessage, error) { return json.Marshal(in) }
