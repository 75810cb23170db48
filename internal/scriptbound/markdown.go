package scriptbound

import "strings"

// Markdown is the table as docs/hpc.md shows it: one row per field, what each plugin
// makes of it and the rule its value must pass there.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| field | SLURM plugin | HTCondor plugin |\n| --- | --- | --- |\n")
	for _, r := range Table {
		b.WriteString("| `" + r.Field + "` | " + cell(r.SLURM) + " | " + cell(r.HTCondor) + " |\n")
	}
	b.WriteString("| any other string | unquoted: " + Word.String() + " | unquoted: " + Word.String() + " |\n")
	return b.String()
}

func cell(w Writing) string {
	var s string
	switch w.How {
	case Unquoted:
		s = "unquoted: " + w.Rule.String()
	case DoubleQuoted:
		s = "double quotes, unescaped: " + DoubleQuotedText.String()
	case Unseen:
		s = "resolved later: refused"
	default:
		s = w.How.String()
	}
	if w.Where != "" {
		s += " — " + w.Where
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "`", "&#96;")
}
