package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// DecisionPath is the document of a pod decision.
var DecisionPath = decisionapi.PathParts()

// Exit codes of `sar-bridge check`.
const (
	ExitAllowed = 0
	ExitDenied  = 1
	ExitError   = 2
)

// Decider is the decision pipeline: *authorizer.Authorizer, or a fake in tests.
type Decider = authorizer.Decider

// User is an identity asserted with --as and --as-group (input.user).
type User = decisionapi.User

// CheckOptions are what a check adds to each pod's input.
type CheckOptions struct {
	Operation string // create (default), delete or status
	Node      string // the target virtual node; empty: the pod's spec.nodeName
	User      *User  // nil: the pod's service account
	// FrontDoor is the front door the decision is made as (input.front_door): a rule's
	// action may differ per front door. Empty: the Data API, as the server answers it.
	FrontDoor authorizer.FrontDoor
}

func (o CheckOptions) frontDoor() authorizer.FrontDoor {
	if o.FrontDoor == "" {
		return authorizer.FrontDoorDataAPI
	}
	return o.FrontDoor
}

// Outcome is the decision on one pod, or the error that prevented it.
type Outcome struct {
	Source     string
	Namespace  string
	Name       string
	DecisionID string
	// Verdict is the answer as the relay and the webhooks read it; Result the whole
	// document, as the server answers it (-o json prints it, the text its review).
	Verdict decisionapi.Verdict
	Result  map[string]any
	Err     error
}

// Allowed is the verdict's allowed; an error is not an allow.
func (o Outcome) Allowed() bool { return o.Err == nil && o.Verdict.Allowed }

// Input is the Data API input the server would receive for p.
func Input(p Pod, opts CheckOptions) (json.RawMessage, error) {
	b, err := decisionapi.Input{Operation: opts.Operation, Pod: p.Pod, Node: decisionapi.OnNode(opts.Node), User: opts.User}.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding the input of %s: %w", p.Source, err)
	}
	return b, nil
}

// Check decides every pod in turn; an error on one pod does not stop the others.
func Check(ctx context.Context, d Decider, pods []Pod, opts CheckOptions) []Outcome {
	out := make([]Outcome, 0, len(pods))
	for _, p := range pods {
		out = append(out, checkOne(ctx, d, p, opts))
	}
	return out
}

func checkOne(ctx context.Context, d Decider, p Pod, opts CheckOptions) Outcome {
	o := Outcome{Source: p.Source, Namespace: p.Pod.Namespace, Name: p.Pod.Name}
	raw, err := Input(p, opts)
	if err != nil {
		o.Err = err
		return o
	}
	decision, err := d.Decide(ctx, authorizer.Request{Path: DecisionPath, Input: raw, Charge: authorizer.ChargeNothing, FrontDoor: opts.frontDoor()})
	o.DecisionID = decision.ID
	if err != nil {
		o.Err = err
		return o
	}
	v, err := authorizer.ReadVerdict(decision)
	if err != nil {
		// A policy override that answers something else is not an allow.
		o.Err = fmt.Errorf("data.%s: %w (got %v)", strings.Join(DecisionPath, "."), err, decision.Result)
		return o
	}
	converted, err := ast.JSON(decision.Result)
	result, ok := converted.(map[string]any)
	if err != nil || !ok {
		o.Err = fmt.Errorf("data.%s: the answer is not a JSON object: %v", strings.Join(DecisionPath, "."), err)
		return o
	}
	o.Verdict = v
	o.Result = result
	return o
}

// ExitCode is 0 when every pod is allowed, 1 when one is denied, 2 on any error.
func ExitCode(outcomes []Outcome) int {
	code := ExitAllowed
	for _, o := range outcomes {
		switch {
		case o.Err != nil:
			return ExitError
		case !o.Allowed():
			code = ExitDenied
		}
	}
	return code
}

// PrintErrors writes one line per failed pod, kubectl style.
func PrintErrors(w io.Writer, outcomes []Outcome) {
	for _, o := range outcomes {
		if o.Err != nil {
			fmt.Fprintf(w, "error: %s (pod %s/%s): %v\n", o.Source, o.Namespace, o.Name, o.Err)
		}
	}
}

// PrintText writes, per decided pod: the outcome, the reason, each review and the
// modifications.
func PrintText(w io.Writer, outcomes []Outcome) error {
	var errs []error
	for _, o := range outcomes {
		if o.Err != nil {
			continue
		}
		errs = append(errs, printOutcome(w, o))
	}
	return errors.Join(errs...)
}

func printOutcome(w io.Writer, o Outcome) error {
	word := "denied"
	if o.Allowed() {
		word = "allowed"
	}
	reason := o.Verdict.Reason
	modifications, err := json.Marshal(o.Result["modifications"])
	if err != nil {
		return fmt.Errorf("encoding the modifications of %s: %w", o.Source, err)
	}
	lines := []string{
		fmt.Sprintf("%s (pod %s/%s): %s", o.Source, o.Namespace, o.Name, word),
		"  reason: " + orDash(reason),
	}
	lines = append(lines, reviewLines(o.Result["review"])...)
	lines = append(lines, "  modifications: "+string(modifications))
	// What a rule in warn or audit let through: deny would refuse it.
	for _, v := range o.Verdict.WouldDeny() {
		lines = append(lines, fmt.Sprintf("  would deny (%s): %s: %s", v.Action, v.Rule, v.Message))
	}
	_, err = fmt.Fprintln(w, strings.Join(lines, "\n"))
	return err
}

// reviewLines says what each SubjectAccessReview of the decision answered. Reviews run
// in order and stop at the first that does not allow, so only the last can refuse.
func reviewLines(review any) []string {
	r, _ := review.(map[string]any)
	attrs, _ := r["attributes"].([]any)
	reason, _ := r["reason"].(string)
	if len(attrs) == 0 {
		return []string{"  review: none sent: " + orDash(reason)}
	}
	allowed, _ := r["allowed"].(bool)
	denied, _ := r["denied"].(bool)
	var lines []string
	for i, a := range attrs {
		answer := "allowed"
		if i == len(attrs)-1 && !allowed {
			answer = "no rule allows it"
			if denied {
				answer = "denied"
			}
		}
		lines = append(lines, fmt.Sprintf("  review: %s: %s", describeAttributes(a), answer))
	}
	if reason != "" {
		lines = append(lines, "  review reason: "+reason)
	}
	return lines
}

func describeAttributes(a any) string {
	m, _ := a.(map[string]any)
	str := func(k string) string { s, _ := m[k].(string); return s }
	resource := str("resource")
	if g := str("group"); g != "" {
		resource += "." + g
	}
	if n := str("name"); n != "" {
		resource += fmt.Sprintf(" %q", n)
	}
	return fmt.Sprintf("%s %s in namespace %q", str("verb"), resource, str("namespace"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jsonOutcome is one decided pod as -o json prints it: the server's answer for it
// (result, decision_id) and which pod it is.
type jsonOutcome struct {
	Source     string         `json:"source"`
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	Result     map[string]any `json:"result"`
	DecisionID string         `json:"decision_id"`
}

// PrintJSON writes {"items": [...]}, one decision document per decided pod.
func PrintJSON(w io.Writer, outcomes []Outcome) error {
	items := make([]jsonOutcome, 0, len(outcomes))
	for _, o := range outcomes {
		if o.Err == nil {
			items = append(items, jsonOutcome{o.Source, o.Namespace, o.Name, o.Result, o.DecisionID})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"items": items}); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
