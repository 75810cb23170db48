package authorizer

import "context"

type noReservationKey struct{}

// WithoutReservation marks a decision whose allow must not reserve quota: a dry run, or
// a workload's pod template (its pods are decided, and reserved, when they are created).
// The quota is still checked.
func WithoutReservation(ctx context.Context) context.Context {
	return context.WithValue(ctx, noReservationKey{}, true)
}

// reserves reports whether an allowed create decided in ctx reserves quota.
func reserves(ctx context.Context) bool {
	v, _ := ctx.Value(noReservationKey{}).(bool)
	return !v
}
