package authorizer

import (
	"testing"
	"time"
)

func TestCachedReviewMaxAge(t *testing.T) {
	const allowedTTL, deniedTTL = 5 * time.Minute, 30 * time.Second
	maxAge := CachedReviewMaxAge(allowedTTL, deniedTTL)
	tests := []struct {
		name  string
		value []byte
		want  time.Duration
	}{
		{name: "allowed", value: encodeReview(ReviewResult{Allowed: true, Reason: "RBAC"}), want: allowedTTL},
		{name: "denied", value: encodeReview(ReviewResult{Denied: true, Reason: "no"}), want: deniedTTL},
		{name: "no opinion", value: encodeReview(ReviewResult{}), want: deniedTTL},
		{name: "allowed and denied: allowed wins, as when it was stored", value: []byte(`{"v":1,"a":true,"d":true}`), want: allowedTTL},
		{name: "other version", value: []byte(`{"v":2,"a":true}`), want: 0},
		{name: "garbage", value: []byte("not json"), want: 0},
		{name: "empty", value: nil, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxAge(tt.value); got != tt.want {
				t.Errorf("max age of %s = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}
