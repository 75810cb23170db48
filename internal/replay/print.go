package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as one JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for a person: the summary, the counts by rule and by
// tenant, then each changed decision with its reasons, then what was not re-decided.
func (r Report) WriteText(w io.Writer) error {
	p := &printer{w: w}
	to := func(outcome string) int {
		n := 0
		for _, d := range r.Flipped {
			if d.New.Outcome == outcome {
				n++
			}
		}
		return n
	}
	p.printf("%d decisions read, %d re-decided: %d flipped (%d allowed → denied, %d denied → allowed, %d other), %d unchanged\n",
		r.Events, r.Replayed, len(r.Flipped), to("denied"), to("allowed"), len(r.Flipped)-to("denied")-to("allowed"), r.Unchanged)
	if len(r.Masked) > 0 || len(r.NoDecision) > 0 || len(r.Failed) > 0 {
		p.printf("not compared: %d masked, %d recorded without a decision, %d failed\n", len(r.Masked)-r.maskedReplayed(), len(r.NoDecision), len(r.Failed))
	}
	if len(r.Flipped) > 0 {
		p.counts("RULE", r.ByRule)
		p.counts("TENANT", r.ByTenant)
		p.printf("\nchanged decisions:\n")
		for _, d := range r.Flipped {
			p.printf("  %s: %s → %s%s\n", d.name(), d.Old.Outcome, d.New.Outcome, d.masked())
			p.answer("was", d.Old)
			p.answer("now", *d.New)
		}
	}
	if len(r.Masked) > 0 {
		p.printf("\nmasked in the log, %s:\n", map[bool]string{true: "re-decided anyway (--masked.decide)", false: "not re-decided"}[r.maskedReplayed() > 0])
		for _, d := range r.Masked {
			p.printf("  %s: %s\n", d.name(), strings.Join(d.Masked, ", "))
		}
	}
	if len(r.NoDecision) > 0 {
		p.printf("\nrecorded without a decision:\n")
		for _, d := range r.NoDecision {
			p.printf("  %s: %s\n", d.name(), d.Old.Error)
		}
	}
	if len(r.Failed) > 0 {
		p.printf("\nfailed:\n")
		for _, d := range r.Failed {
			msg := d.Old.Error
			if d.New != nil {
				msg = "the candidate: " + d.New.Error
			}
			p.printf("  %s (%s): %s\n", d.name(), d.Source, msg)
		}
	}
	return p.err
}

func (r Report) maskedReplayed() int {
	n := 0
	for _, d := range r.Masked {
		if d.New != nil {
			n++
		}
	}
	return n
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) counts(title string, m map[string]Count) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p.printf("\n")
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tALLOWED→DENIED\tDENIED→ALLOWED\n", title)
	for _, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\n", name, m[k].ToDenied, m[k].ToAllowed)
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func (p *printer) answer(label string, a Answer) {
	switch {
	case a.Error != "":
		p.printf("    %s: %s\n", label, a.Error)
	case len(a.Violations) > 0:
		for _, v := range a.Violations {
			action := ""
			if v.Action != "" && v.Action != "deny" {
				action = " (" + v.Action + ")"
			}
			p.printf("    %s: %s%s: %s\n", label, v.Rule, action, v.Message)
		}
	case a.Reason != "":
		p.printf("    %s: %s\n", label, a.Reason)
	}
}

// name is how a decision is shown: its pod, tenant, operation and id.
func (d Decision) name() string {
	pod := d.Namespace + "/" + d.Pod
	if d.Pod == "" {
		pod = d.Namespace + "/(no name)"
	}
	if d.Namespace == "" && d.Pod == "" {
		pod = "(no pod)"
	}
	var extra []string
	if d.Tenant != "" {
		extra = append(extra, "tenant "+d.Tenant)
	}
	if d.Operation != "" {
		extra = append(extra, d.Operation)
	}
	extra = append(extra, "decision "+d.DecisionID)
	return pod + " (" + strings.Join(extra, ", ") + ")"
}

func (d Decision) masked() string {
	if len(d.Masked) > 0 {
		return " [masked input]"
	}
	return ""
}
