package e2e

// Issue 31, item 1: the real binary, under the chart's memory limit, survives a stream
// of the largest pods Kubernetes stores, sent by a service account allowed to offload,
// and keeps answering ordinary decisions.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// chartMemoryLimit is charts/sar-bridge's resources.limits.memory (and manifests/base's):
// the bridge keeps the Go runtime under 80% of it (main.go).
const chartMemoryLimit = 512 << 20

// maximalPodBody is a decision on a pod as large as Kubernetes stores: 5,000 containers
// with 63-character names, distinct per i. Its first container's cpu limit is over the
// team's cap of 2, so the decision is a denial with one reason.
func maximalPodBody(i int, sa string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"input": {"operation": "create", "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "max-%d", "namespace": "team-a"}, "spec": {"serviceAccountName": %q, "containers": [`, i, sa)
	for c := range 5000 {
		if c > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("c%04d-%d-%s", c, i, strings.Repeat("x", 63))[:63]
		res := `{"requests": {"cpu": "1m"}}`
		if c == 0 {
			res = `{"limits": {"cpu": "3"}}`
		}
		fmt.Fprintf(&b, `{"name": %q, "image": "busybox:1.36", "resources": %s}`, name, res)
	}
	b.WriteString(`]}}}}`)
	return []byte(b.String())
}

// memoryCgroup makes a cgroup v1 memory group limited to limit bytes, when this machine
// lets the test make one, and a script that starts the binary inside it (so that the
// bridge reads its limit at start, as in a container). peak reads the group's peak usage
// and how often the limit was hit.
func memoryCgroup(t *testing.T, binary string, limit int64) (wrapper string, peak func() (max int64, failcnt int64), ok bool) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/memory", fmt.Sprintf("sar-bridge-e2e-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("no memory cgroup (%v): checking the process's peak RSS only", err)
		return "", nil, false
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	write := func(file, v string) error { return os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644) }
	if err := write("memory.limit_in_bytes", strconv.FormatInt(limit, 10)); err != nil {
		t.Logf("memory cgroup limit: %v: checking the process's peak RSS only", err)
		return "", nil, false
	}
	_ = write("memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10)) // no swap to hide in, where accounted
	wrapper = filepath.Join(t.TempDir(), "in-cgroup.sh")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs || exit 1\nexec %s \"$@\"\n", dir, binary)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	read := func(file string) int64 {
		b, _ := os.ReadFile(filepath.Join(dir, file))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	return wrapper, func() (int64, int64) { return read("memory.max_usage_in_bytes"), read("memory.failcnt") }, true
}

// peakRSS is the process's high-water mark of resident memory (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

func TestMemoryUnderMaximalPods(t *testing.T) {
	name := strings.NewReplacer("/", "_").Replace(t.Name())
	opts := cluster.BridgeOptions{Binary: suite.binary, Kubeconfig: suite.kubeconfig, Args: baseArgs(),
		Env: []string{"GODEBUG=gctrace=1"}} // the collector's lines in the log: live heap after each
	wrapper, cgroupPeak, inCgroup := memoryCgroup(t, suite.binary, chartMemoryLimit)
	if inCgroup {
		opts.Binary = wrapper // the bridge reads its limit from the cgroup, as in a container
	} else {
		opts.Env = append(opts.Env, fmt.Sprintf("GOMEMLIMIT=%d", chartMemoryLimit*8/10)) // what it would read
	}
	bridgeSeq++
	opts.LogPath = filepath.Join(suite.workDir, fmt.Sprintf("bridge-%02d-%s.log", bridgeSeq, name))
	b, err := cluster.StartBridge(opts)
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if inCgroup && !strings.Contains(b.Log(), fmt.Sprintf(`msg="Go memory limit" bytes=%d`, chartMemoryLimit*8/10)) {
		t.Errorf("the bridge did not take 80%% of its cgroup's limit:\n%s", tail(b.Log(), 20))
	}

	const senders, perSender = 8, 20 // 160 maximal pods: the issue saw about 105 exceed the limit
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				n := s*perSender + i
				sa, reason := "runner", `sets cpu limit 3 over the cap 2 for group "system:serviceaccounts:team-a"`
				if n%4 == 3 {
					sa, reason = "intruder", `system:serviceaccount:team-a:intruder may not create pods.interlink.io in namespace "team-a"`
				}
				r, err := b.Post("application/json", maximalPodBody(n, sa))
				if err != nil || r.Status != 200 || r.Result == nil || r.Allowed() || !strings.Contains(r.Reason(), reason) {
					if wrong.Add(1) <= 5 {
						t.Errorf("maximal pod %d as %s: %v %.300v, want a denial with %q", n, sa, err, r, reason)
					}
				}
			}
		}()
	}

	// Ordinary decisions go on meanwhile, and are answered correctly and promptly.
	stop := make(chan struct{})
	var ordinary, slowest atomic.Int64
	ordinaryDone := make(chan struct{})
	go func() {
		defer close(ordinaryDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			in := input("create", newPod("team-a", "runner", fmt.Sprintf("ordinary-%d", i), onlyContainers(container("main", "500m", "1Gi"))))
			r, err := b.Decide(in)
			if err != nil || r.Status != 200 || !r.Allowed() {
				t.Errorf("ordinary decision %d during the stream: %v %v", i, err, r)
				continue
			}
			ordinary.Add(1)
			if d := r.Elapsed.Milliseconds(); d > slowest.Load() {
				slowest.Store(d)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-ordinaryDone

	if b.Exited() {
		t.Fatalf("the bridge exited during the stream (OOM-killed?):\n%s", tail(b.Log(), 40))
	}
	r, err := b.Decide(input("create", newPod("team-a", "runner", "after")))
	if err != nil || r.Status != 200 || !r.Allowed() {
		t.Fatalf("after the stream: %v %v", err, r)
	}
	rss := peakRSS(t, b.PID())
	t.Logf("%d maximal pods (%d KiB each) from %d senders; %d ordinary decisions meanwhile, slowest %d ms; peak RSS %d MiB",
		senders*perSender, len(maximalPodBody(0, "runner"))>>10, senders, ordinary.Load(), slowest.Load(), rss>>20)
	if rss >= chartMemoryLimit {
		t.Errorf("peak RSS %d MiB, over the chart's limit of %d MiB", rss>>20, chartMemoryLimit>>20)
	}
	if inCgroup {
		usage, failcnt := cgroupPeak()
		t.Logf("memory cgroup: peak usage %d MiB, limit hit %d times", usage>>20, failcnt)
		if failcnt > 0 {
			t.Errorf("the bridge hit its memory limit %d times", failcnt)
		}
	}
	if ordinary.Load() < 10 {
		t.Errorf("only %d ordinary decisions answered during the stream", ordinary.Load())
	}
	if s := slowest.Load(); s > 5000 {
		t.Errorf("an ordinary decision took %d ms during the stream", s)
	}
	if live := maxLiveHeap(b.Log()); live > 300<<20 {
		t.Errorf("live heap after a collection reached %d MiB, want at most 300 MiB", live>>20)
	} else {
		t.Logf("largest live heap after a collection: %d MiB", live>>20)
	}
}

// maxLiveHeap is the largest live heap of the collector's lines (GODEBUG=gctrace=1:
// "… 440->459->154 MB, …", the last number).
func maxLiveHeap(log string) int64 {
	var max int64
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			parts := strings.Split(f, "->")
			if len(parts) != 3 {
				continue
			}
			if mb, err := strconv.ParseInt(parts[2], 10, 64); err == nil && mb<<20 > max {
				max = mb << 20
			}
		}
	}
	return max
}
