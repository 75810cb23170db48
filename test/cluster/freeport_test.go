package cluster

import "testing"

// TestFreePortNeverRepeats: the ports FreePort returns in one process are distinct, so
// two listeners picked one after the other never collide.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
