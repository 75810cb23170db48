package authorizer

import (
	"context"
	"encoding/json"

	"github.com/sar-bridge/sar-bridge/policies"
)

// Request is one decision as a front door asks for it. Everything that changes how a
// decision is made is a field here, set where the front door builds the request, so a
// reader sees at the call what a decision is asked under.
type Request struct {
	// Path is the policy document, e.g. decisionapi.PathParts().
	Path []string
	// Input is the Data API's input as the caller sent it (a decisionapi.Input for a pod
	// decision, or opa-openshift's shape on its path).
	Input json.RawMessage
	// As is the subject a trusted caller has authenticated (the API server's userInfo in
	// an AdmissionReview); the input then carries no input.user. Nil: the pod's service
	// account, or input.user when the caller may impersonate it.
	As *Subject
	// Charge says what an allowed create of a tenant with a quota charges.
	Charge ChargeMode
	// NotStored marks a pod that is not (yet) stored under its name, such as one under
	// admission: the pod of that name in the API server, if any, is another one, so
	// input.hpc.writers is left out (and the annotations it would let through refused).
	NotStored bool
	// LogFields are key/value pairs added to the decision's log line, e.g. the route.
	LogFields []any
	// AccessToken is the caller's forwarded access token (opa-openshift's SSAR mode).
	AccessToken string
	// FrontDoor is the way the request came in, input.front_door: each rule's action
	// (data.interlink.enforcement) may differ per front door. Empty: FrontDoorDataAPI.
	FrontDoor FrontDoor
	// InputValid says Input is known to be valid JSON: a member astjson.Members returned
	// (the Data API server checks the body so), so the decision does not check its
	// syntax again. Set it for nothing else: false checks it.
	InputValid bool
}

// FrontDoor names a way in to a decision, as input.front_door shows it.
type FrontDoor string

// The front doors (policies.FrontDoors).
const (
	FrontDoorRelay     FrontDoor = policies.FrontDoorRelay
	FrontDoorAdmission FrontDoor = policies.FrontDoorAdmission
	FrontDoorDataAPI   FrontDoor = policies.FrontDoorDataAPI
)

// name is the front door's input value; an unset one is the Data API's.
func (f FrontDoor) name() string {
	if f == "" {
		return string(FrontDoorDataAPI)
	}
	return string(f)
}

// ChargeMode is what an allowed create charges to its tenant's quota ledger.
type ChargeMode int

const (
	// ChargeByUID takes a pod with a UID to be stored, one without to be new (the Data
	// API, which cannot know).
	ChargeByUID ChargeMode = iota
	// ChargeNothing checks the quota and charges nothing: a dry run, `sar-bridge check`, a
	// workload's template (its pods are charged when created), the mutating webhook (the
	// validating one charges the same pod).
	ChargeNothing
	// ChargeStored is a pod already stored (the relay, a binding): a front door may have
	// charged it before, and the reconciler confirmed it on the pod.
	ChargeStored
	// ChargeNew is a pod being created (the validating webhook): nothing can have
	// confirmed a charge of it yet.
	ChargeNew
)

// Decider answers decision requests; *Authorizer is the one every front door uses.
type Decider interface {
	Decide(ctx context.Context, r Request) (Decision, error)
}
