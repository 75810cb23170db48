package authorizer

import "context"

type logFieldsKey struct{}

// WithLogFields adds key/value pairs to the decision-log line of decisions made with
// ctx, so a front door can say which of its routes asked (e.g. "route", "create").
func WithLogFields(ctx context.Context, keyvals ...any) context.Context {
	prev := logFieldsFrom(ctx)
	fields := make([]any, 0, len(prev)+len(keyvals))
	fields = append(append(fields, prev...), keyvals...)
	return context.WithValue(ctx, logFieldsKey{}, fields)
}

func logFieldsFrom(ctx context.Context) []any {
	fields, _ := ctx.Value(logFieldsKey{}).([]any)
	return fields
}

// LogFields returns the pairs WithLogFields added to ctx.
func LogFields(ctx context.Context) []any { return logFieldsFrom(ctx) }
