package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/policies"
)

// Evaluator evaluates a policy document: the candidate policy (policies.Reloader).
type Evaluator interface {
	EvalValue(ctx context.Context, path []string, input ast.Value, memo policies.Memo) (policies.Result, error)
}

// maskMarker is what the bridge's decision log mask writes in place of a value
// (internal/opaplugins/mask.rego).
const maskMarker = "**masked**"

// Answer is one decision's outcome as replay compares it.
type Answer struct {
	// Outcome is allowed, denied, undefined (no result) or error (the bridge answered
	// no decision, or the candidate failed).
	Outcome    string      `json:"outcome"`
	Reason     string      `json:"reason,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Violation is a rule's message in a decision (data.interlink.authz.decision's
// violations, where the policy names its rules).
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Action  string `json:"action,omitempty"`
}

// Decision is one event, re-decided or not.
type Decision struct {
	DecisionID string            `json:"decision_id"`
	Source     string            `json:"source"`
	Tenant     string            `json:"tenant,omitempty"`
	Namespace  string            `json:"namespace,omitempty"`
	Pod        string            `json:"pod,omitempty"`
	Operation  string            `json:"operation,omitempty"`
	Revisions  map[string]string `json:"revisions,omitempty"` // the bundles that decided it, by name
	Old        Answer            `json:"old"`
	New        *Answer           `json:"new,omitempty"`
	// Rules are what a flip is put down to: the rules whose violations deny it (the
	// candidate's for allowed → denied, the recorded ones for denied → allowed), else
	// the denying reason.
	Rules []string `json:"rules,omitempty"`
	// Masked lists what the log's mask changed in the input (OPA's erased and masked
	// paths, or "**masked**" values): the recorded input is not what was decided, so
	// the event is not re-decided.
	Masked []string `json:"masked,omitempty"`
}

// Count is how many decisions flipped each way.
type Count struct {
	ToDenied  int `json:"allowed_to_denied"`
	ToAllowed int `json:"denied_to_allowed"`
}

// Report is a replay's result.
type Report struct {
	Events    int `json:"events"`
	Replayed  int `json:"replayed"`
	Unchanged int `json:"unchanged"`
	// Flipped are the decisions whose answer changed (allowed ↔ denied, or to or from
	// undefined).
	Flipped  []Decision       `json:"flipped"`
	ByRule   map[string]Count `json:"by_rule"`
	ByTenant map[string]Count `json:"by_tenant"`
	// Masked events were not re-decided (see Decision.Masked); NoDecision events
	// recorded an error rather than a decision (a 503), so there is nothing to compare;
	// Failed events could not be re-decided (an unreadable event, or the candidate
	// failed on it).
	Masked     []Decision `json:"masked"`
	NoDecision []Decision `json:"no_decision"`
	Failed     []Decision `json:"failed"`
}

// Options configures Run.
type Options struct {
	// DecideMasked re-decides masked events too; each stays listed in Report.Masked
	// and, when it flips, is marked masked in Report.Flipped.
	DecideMasked bool
}

// Run re-decides every event with the candidate.
func Run(ctx context.Context, events []Event, candidate Evaluator, opts Options) Report {
	r := Report{Events: len(events), ByRule: map[string]Count{}, ByTenant: map[string]Count{},
		Flipped: []Decision{}, Masked: []Decision{}, NoDecision: []Decision{}, Failed: []Decision{}}
	for _, e := range events {
		d, input, err := describe(e)
		if err != nil {
			d.Old = Answer{Outcome: "error", Error: err.Error()}
			r.Failed = append(r.Failed, d)
			continue
		}
		if d.Masked = maskedIn(e, input); len(d.Masked) > 0 {
			r.Masked = append(r.Masked, d)
			if !opts.DecideMasked {
				continue
			}
		}
		if d.Old.Outcome == "error" {
			r.NoDecision = append(r.NoDecision, d)
			continue
		}
		res, err := candidate.EvalValue(ctx, strings.Split(strings.Trim(e.Path, "/"), "/"), input, policies.Memo{})
		if err != nil {
			d.New = &Answer{Outcome: "error", Error: err.Error()}
			r.Failed = append(r.Failed, d)
			continue
		}
		r.Replayed++
		answer := readAnswer(res.Value, res.Defined)
		d.New = &answer
		if !flipped(d.Old, answer, e.Result, res.Value) {
			r.Unchanged++
			continue
		}
		d.Rules = blame(d.Old, answer)
		r.count(d)
		r.Flipped = append(r.Flipped, d)
	}
	return r
}

// count adds a flip to the counts by rule and tenant.
func (r *Report) count(d Decision) {
	add := func(m map[string]Count, k string) {
		c := m[k]
		if d.New.Outcome == "allowed" {
			c.ToAllowed++
		} else {
			c.ToDenied++
		}
		m[k] = c
	}
	for _, rule := range d.Rules {
		add(r.ByRule, rule)
	}
	add(r.ByTenant, d.Tenant)
}

// Flips says whether anything flipped: `replay`'s exit status.
func (r Report) Flips() bool { return len(r.Flipped) > 0 }

// describe reads what the report says of an event, and its input.
func describe(e Event) (Decision, ast.Value, error) {
	d := Decision{DecisionID: e.DecisionID, Source: e.Source}
	for name, b := range e.Bundles {
		if d.Revisions == nil {
			d.Revisions = map[string]string{}
		}
		d.Revisions[name] = b.Revision
	}
	if len(e.Error) > 0 && !bytes.Equal(e.Error, []byte("null")) {
		d.Old = Answer{Outcome: "error", Error: errorMessage(e.Error)}
	} else if len(e.Result) == 0 {
		d.Old = Answer{Outcome: "undefined"}
	} else {
		v, err := ast.ValueFromReader(bytes.NewReader(e.Result))
		if err != nil {
			return d, nil, fmt.Errorf("the event's result: %w", err)
		}
		d.Old = readAnswer(v, true)
	}
	if e.Path == "" {
		return d, nil, fmt.Errorf("the event has no path (a query, not a document of the Data API)")
	}
	if len(e.Input) == 0 {
		return d, nil, fmt.Errorf("the event has no input (erased whole by a mask?)")
	}
	input, err := ast.ValueFromReader(bytes.NewReader(e.Input))
	if err != nil {
		return d, nil, fmt.Errorf("the event's input: %w", err)
	}
	if obj, ok := input.(ast.Object); ok {
		str := func(path ...string) string {
			terms := make([]*ast.Term, len(path))
			for i, p := range path {
				terms[i] = ast.StringTerm(p)
			}
			v, err := obj.Find(terms)
			if err != nil {
				return ""
			}
			s, _ := v.(ast.String)
			return string(s)
		}
		d.Tenant, d.Operation = str("tenant"), str("operation")
		d.Namespace, d.Pod = str("pod", "metadata", "namespace"), str("pod", "metadata", "name")
	}
	return d, input, nil
}

func errorMessage(raw json.RawMessage) string {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// maskedIn lists what the mask changed in the event's input.
func maskedIn(e Event, input ast.Value) []string {
	var out []string
	for _, p := range e.Erased {
		if strings.HasPrefix(p, "/input") {
			out = append(out, "erased "+p)
		}
	}
	for _, p := range e.Masked {
		if strings.HasPrefix(p, "/input") {
			out = append(out, "masked "+p)
		}
	}
	if len(out) > 0 {
		return out
	}
	// The lists may have been dropped on the way (a log pipeline that keeps only
	// input and result): the marker itself still says so.
	found := false
	ast.WalkTerms(input, func(t *ast.Term) bool {
		if s, ok := t.Value.(ast.String); ok && strings.Contains(string(s), maskMarker) {
			found = true
		}
		return found
	})
	if found {
		out = append(out, "a value holds "+maskMarker)
	}
	return out
}

// readAnswer reads a result: a decision object (allowed, reason, violations), or the
// boolean of data.interlink.authz.allow.
func readAnswer(v ast.Value, defined bool) Answer {
	if !defined || v == nil {
		return Answer{Outcome: "undefined"}
	}
	switch x := v.(type) {
	case ast.Boolean:
		return Answer{Outcome: outcome(bool(x))}
	case ast.Object:
		a := Answer{Outcome: "other"}
		if b, ok := member(x, "allowed").(ast.Boolean); ok {
			a.Outcome = outcome(bool(b))
		}
		if s, ok := member(x, "reason").(ast.String); ok {
			a.Reason = string(s)
		}
		if vs, ok := member(x, "violations").(*ast.Array); ok {
			vs.Foreach(func(t *ast.Term) {
				o, ok := t.Value.(ast.Object)
				if !ok {
					return
				}
				var viol Violation
				if s, ok := member(o, "rule").(ast.String); ok {
					viol.Rule = string(s)
				}
				if s, ok := member(o, "message").(ast.String); ok {
					viol.Message = string(s)
				}
				if s, ok := member(o, "action").(ast.String); ok {
					viol.Action = string(s)
				}
				a.Violations = append(a.Violations, viol)
			})
		}
		return a
	}
	return Answer{Outcome: "other"}
}

func member(o ast.Object, k string) ast.Value {
	if t := o.Get(ast.StringTerm(k)); t != nil {
		return t.Value
	}
	return nil
}

func outcome(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// flipped says whether the answer changed: its outcome, or, for a result that is
// neither allowed nor denied, the document itself.
func flipped(old, cur Answer, oldRaw json.RawMessage, curValue ast.Value) bool {
	if old.Outcome != cur.Outcome {
		return true
	}
	if old.Outcome != "other" {
		return false
	}
	was, err := ast.ValueFromReader(bytes.NewReader(oldRaw))
	return err != nil || was.Compare(curValue) != 0
}

// blame names what a flip is put down to: the denying side's rules (deny-action
// violations; a result without actions counts them all), else its reason.
func blame(old, cur Answer) []string {
	denying := cur
	if cur.Outcome == "allowed" {
		denying = old
	}
	set := map[string]bool{}
	for _, v := range denying.Violations {
		if v.Action != "" && v.Action != "deny" {
			continue
		}
		name := v.Rule
		if name == "" {
			name = "reason: " + v.Message
		}
		set[name] = true
	}
	if len(set) == 0 {
		switch {
		case denying.Reason != "":
			set["reason: "+denying.Reason] = true
		default:
			set[denying.Outcome] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
