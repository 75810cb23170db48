package tenants

import (
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// RetryOnConflict is retry.RetryOnConflict without its one surprise: when an attempt
// fails with an error that wraps a context's end (a GET that client-go kept retrying
// until the write's timeout, against an API server that drops or hangs), OnError
// treats it as an interrupted wait and returns the last *conflict* error — nil when
// there was none — so a write that never landed would look done, and its charge be an
// allow. Here the last attempt's error stands.
func RetryOnConflict(backoff wait.Backoff, fn func() error) error {
	var last error
	err := retry.RetryOnConflict(backoff, func() error {
		last = fn()
		return last
	})
	if last != nil {
		return last // the last attempt's, conflict or not
	}
	return err
}
