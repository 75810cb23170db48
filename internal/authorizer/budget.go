package authorizer

import (
	"context"
	"fmt"

	"golang.org/x/sync/semaphore"
)

// What one decision may allocate, and all decisions at once (issue 31). A decision
// allocates in proportion to its input: decoding it into the policy's values, deriving
// input.resources, evaluating rules over every container. Measured on a pod of 5,000
// containers (480 KiB): 12 MiB allocated per decision, about 25 bytes per input byte.
// So the inputs being decided at once are bounded in bytes, in two budgets: ordinary
// pods (a few KiB) never wait behind a stream of maximal ones.
const (
	// MaxInputBytes is the largest pod decision input the bridge decides: the largest
	// object Kubernetes stores is 1.5 MiB (etcd's default request limit), so no real
	// pod comes near it.
	MaxInputBytes = 3 << 20
	// smallInputBytes separates the two budgets: a pod with a hundred containers and
	// their environment is below it.
	smallInputBytes  = 64 << 10
	smallBudgetBytes = 4 << 20
	largeBudgetBytes = 2 * MaxInputBytes
)

// decisionBudget admits decisions by the size of their input.
type decisionBudget struct{ small, large *semaphore.Weighted }

func newDecisionBudget() decisionBudget {
	return decisionBudget{small: semaphore.NewWeighted(smallBudgetBytes), large: semaphore.NewWeighted(largeBudgetBytes)}
}

// acquire waits, within ctx, until a decision of an input of n bytes fits, and returns
// what releases it. Inputs over MaxInputBytes are refused.
func (b decisionBudget) acquire(ctx context.Context, n int) (release func(), err error) {
	if n > MaxInputBytes {
		return nil, inputErrorf("input is %d bytes, over the %d a pod decision takes (Kubernetes stores no object over 1.5 MiB)", n, MaxInputBytes)
	}
	sem := b.small
	if n > smallInputBytes {
		sem = b.large
	}
	if err := sem.Acquire(ctx, int64(n)); err != nil {
		return nil, NewUnavailableError(fmt.Errorf("too many large pods are being decided at once; try again: %w", err))
	}
	return func() { sem.Release(int64(n)) }, nil
}
