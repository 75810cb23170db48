package e2e

// Fault tests: a loopback TCP proxy between the bridge and kube-apiserver injects
// hangs, latency and dropped connections; SIGTERM during a burst of decisions; policy,
// data and mapping reloads (good and broken files).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// startTestBridge starts a bridge with exactly args (no baseArgs) and kubeconfig, stops
// it at the end of the test and prints its log tail if the test failed.
func startTestBridge(t *testing.T, kubeconfig string, args ...string) *cluster.Bridge {
	t.Helper()
	bridgeSeq++
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	b, err := cluster.StartBridge(cluster.BridgeOptions{
		Binary:     suite.binary,
		Kubeconfig: kubeconfig,
		Args:       args,
		LogPath:    filepath.Join(suite.workDir, fmt.Sprintf("bridge-%02d-%s.log", bridgeSeq, name)),
	})
	if b != nil {
		t.Cleanup(func() {
			b.Stop()
			if t.Failed() {
				t.Logf("--- sar-bridge log %s ---\n%s", b.LogPath, tail(b.Log(), 150))
			}
		})
	}
	if err != nil {
		t.Fatalf("starting sar-bridge: %v", err)
	}
	return b
}

// faultBridge starts a proxy in front of kube-apiserver and a bridge (baseArgs(extra...))
// that reaches the API only through it. The proxy is back in pass mode and closed at the
// end of the test.
func faultBridge(t *testing.T, extra ...string) (*cluster.Bridge, *cluster.Proxy) {
	t.Helper()
	p, err := cluster.StartProxy(suite.cluster.Host())
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	kc := filepath.Join(suite.workDir, fmt.Sprintf("via-proxy-%d.kubeconfig", bridgeSeq+1))
	if err := suite.cluster.WriteServiceAccountKubeconfigVia(context.Background(), kc, "sar-bridge", "sar-bridge", p.URL(), time.Hour); err != nil {
		t.Fatal(err)
	}
	b := startTestBridge(t, kc, baseArgs(extra...)...)
	t.Cleanup(p.Pass) // runs before the bridge stops: a clean shutdown
	if p.Accepted() == 0 {
		t.Fatalf("the bridge is ready but never connected through the proxy %s", p.Addr)
	}
	return b, p
}

// decideWithHeader posts {"input": in} with client and returns the parsed answer and
// the response headers.
func decideWithHeader(client *http.Client, b *cluster.Bridge, in map[string]any) (*cluster.Response, http.Header, error) {
	body, err := json.Marshal(map[string]any{"input": in})
	if err != nil {
		return nil, nil, err
	}
	return postDecision(client, b.URL+cluster.DecisionPath, body)
}

func postDecision(client *http.Client, url string, body []byte) (*cluster.Response, http.Header, error) {
	start := time.Now()
	res, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, res.Header, fmt.Errorf("reading the answer (HTTP %d): %w", res.StatusCode, err)
	}
	r := &cluster.Response{Status: res.StatusCode, Body: data, Elapsed: time.Since(start)}
	var wire struct {
		Result     *cluster.Result `json:"result"`
		DecisionID string          `json:"decision_id"`
		cluster.OPAError
	}
	if err := json.Unmarshal(data, &wire); err == nil {
		r.Result, r.DecisionID, r.Error = wire.Result, wire.DecisionID, wire.OPAError
	} else {
		r.ParseError = err
	}
	return r, res.Header, nil
}

// checkReviewFailed checks a fail-closed answer: 503 internal_error, "subject access
// review failed: ...", never allowed, within bound.
func checkReviewFailed(t *testing.T, what string, r *cluster.Response, bound time.Duration) {
	t.Helper()
	if r.Allowed() {
		t.Errorf("%s: ALLOWED while the API cannot answer: %s", what, r)
	}
	if r.Status != http.StatusServiceUnavailable || r.Error.Code != "internal_error" {
		t.Errorf("%s: want 503 internal_error, got %s", what, r)
	}
	if !strings.HasPrefix(r.Error.Message, "subject access review failed:") {
		t.Errorf("%s: message %q does not start with %q", what, r.Error.Message, "subject access review failed:")
	}
	if r.Elapsed > bound {
		t.Errorf("%s: answered after %s, want within %s", what, r.Elapsed.Round(time.Millisecond), bound)
	}
}

// The API server behind a hanging, slow or refusing link: uncached decisions are 503
// within the review timeout (never an allow), cached allows stay what they were, and the
// bridge recovers by itself when the link heals.
func TestFaultProxyModes(t *testing.T) {
	const reviewTimeout = 3 * time.Second
	b, p := faultBridge(t, "--review.timeout=3s", "--cache.denied-ttl=1s")
	offloadA := `RoleBinding "offload/team-a"`

	// A cached allow (allowed TTL 5m; create reviews carry no pod name).
	cachedIn := input("create", newPod("team-a", "runner", "fault-cached"))
	before := decide(t, b, cachedIn, allow(offloadA))
	decide(t, b, cachedIn, allow(offloadA))

	seq := 0
	// runner may delete any pod in team-a and delete reviews carry the pod's name:
	// a fresh name is an uncached review that the API would allow.
	uncachedAllow := func() map[string]any {
		seq++
		return input("delete", newPod("team-a", "runner", fmt.Sprintf("fault-%d", seq)))
	}
	// A fresh ServiceAccount: an uncached review the API would deny.
	uncachedDeny := func() map[string]any {
		seq++
		return input("create", newPod("team-a", fmt.Sprintf("stranger-%d", seq), "fault-deny"))
	}

	for _, tc := range []struct {
		name  string
		set   func()
		bound time.Duration
	}{
		{"blackhole", p.Blackhole, reviewTimeout + time.Second},
		{"delay 10s", func() { p.Delay(10 * time.Second) }, reviewTimeout + time.Second},
		// Refused connections are retried a few times with backoff, then fail fast.
		{"drop", p.Drop, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			defer p.Pass()
			var took []string
			for i, in := range []map[string]any{uncachedAllow(), uncachedDeny(), uncachedAllow()} {
				r, err := b.Decide(in)
				if err != nil {
					t.Fatal(err)
				}
				checkReviewFailed(t, fmt.Sprintf("uncached decision %d", i), r, tc.bound)
				took = append(took, r.Elapsed.Round(time.Millisecond).String())
			}
			// The cached allow may be served from the cache, but only as it was.
			r, err := b.Decide(cachedIn)
			if err != nil {
				t.Fatal(err)
			}
			switch r.Status {
			case http.StatusOK:
				if !r.Allowed() || r.Reason() != before.Reason() {
					t.Errorf("cached decision changed during the fault: before %s, now %s", before, r)
				}
			case http.StatusServiceUnavailable:
				checkReviewFailed(t, "cached decision", r, tc.bound)
			default:
				t.Errorf("cached decision during the fault: %s", r)
			}
			t.Logf("%s: uncached 503 after %s; cached: HTTP %d after %s", tc.name, strings.Join(took, ", "), r.Status, r.Elapsed.Round(time.Millisecond))

			p.Pass()
			var last *cluster.Response
			healed, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
				r, err := b.Decide(uncachedAllow())
				if err != nil {
					t.Fatalf("POST decision: %v", err)
				}
				last = r
				if r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable {
					t.Errorf("unexpected answer while recovering: %s", r)
				}
				return r.Status == http.StatusOK
			})
			if !ok {
				t.Fatalf("no recovery %s after the link healed; last %s", healed, last)
			}
			checkDecision(t, last, allow(offloadA))
			decide(t, b, uncachedDeny(), deny(mayNot(sa("team-a", fmt.Sprintf("stranger-%d", seq)), "create", "pods.interlink.io", "team-a")...))
			t.Logf("%s: recovered %s after the link healed (no restart)", tc.name, healed.Round(time.Millisecond))
		})
	}

	// A short outage is bridged by the retries within the deadline.
	t.Run("brief drop is retried", func(t *testing.T) {
		dropped := p.Dropped()
		p.Drop()
		go func() {
			time.Sleep(150 * time.Millisecond)
			p.Pass()
		}()
		r, err := b.Decide(uncachedAllow())
		if err != nil {
			t.Fatal(err)
		}
		checkDecision(t, r, allow(offloadA))
		t.Logf("decision during a 150ms drop: HTTP %d after %s (%d connections dropped)", r.Status, r.Elapsed.Round(time.Millisecond), p.Dropped()-dropped)
	})
	if t.Failed() {
		return
	}
	if err := b.WaitReady(20 * time.Second); err != nil {
		t.Errorf("/ready after the faults: %v", err)
	}
}

// --review.max-in-flight: with the API slow, reviews beyond the cap wait within their
// deadline, then get 503 with Retry-After; decisions that need no review are unaffected.
func TestFaultInFlightCap(t *testing.T) {
	const reviewTimeout = 2500 * time.Millisecond
	b, p := faultBridge(t, "--review.max-in-flight=1", "--review.timeout=2500ms", "--cache.denied-ttl=1s")
	decide(t, b, input("delete", newPod("team-a", "runner", "cap-warm")), allow(`RoleBinding "offload/team-a"`))
	errorsBefore := metric(t, b, reviewsTotal, map[string]string{"result": "error"})

	// Each review takes 1.5s: the first holds the only slot until 1.5s, the second
	// cannot finish by 2.5s, the rest never get the slot.
	p.Delay(1500 * time.Millisecond)
	defer p.Pass()
	const n = 6
	client := &http.Client{Timeout: 30 * time.Second}
	type answer struct {
		r   *cluster.Response
		h   http.Header
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, h, err := decideWithHeader(client, b, input("delete", newPod("team-a", "runner", fmt.Sprintf("cap-%d", i))))
			answers[i] = answer{r, h, err}
		}()
	}
	// A decision without a review (unmapped tenant) is not queued behind the cap.
	time.Sleep(200 * time.Millisecond)
	un := decide(t, b, input("create", newPod("orphan", "runner", "cap-unmapped")), deny(`tenant "orphan"`))
	if un.Elapsed > time.Second {
		t.Errorf("unmapped-tenant decision took %s while the review slots were busy", un.Elapsed)
	}
	wg.Wait()
	p.Pass()

	allowed, refused, capped := 0, 0, 0
	for i, a := range answers {
		if a.err != nil {
			t.Errorf("decision %d: %v", i, a.err)
			continue
		}
		switch a.r.Status {
		case http.StatusOK:
			checkDecision(t, a.r, allow(`RoleBinding "offload/team-a"`))
			allowed++
		case http.StatusServiceUnavailable:
			checkReviewFailed(t, fmt.Sprintf("decision %d", i), a.r, reviewTimeout+time.Second)
			refused++
			if ra, err := strconv.Atoi(a.h.Get("Retry-After")); err != nil || ra <= 0 {
				t.Errorf("decision %d: 503 without a positive Retry-After (%q): %s", i, a.h.Get("Retry-After"), a.r)
			}
			if strings.Contains(a.r.Error.Message, "too many reviews in flight") {
				capped++
			}
		default:
			t.Errorf("decision %d: %s", i, a.r)
		}
		t.Logf("decision %d: HTTP %d after %s Retry-After=%q %s", i, a.r.Status, a.r.Elapsed.Round(time.Millisecond), a.h.Get("Retry-After"), strings.TrimSpace(string(a.r.Body))[:min(120, len(strings.TrimSpace(string(a.r.Body))))])
	}
	if allowed < 1 || allowed > 2 {
		t.Errorf("%d of %d decisions allowed; with one slot, 1.5s reviews and a 2.5s timeout want 1 or 2", allowed, n)
	}
	// Waiters whose deadline passes as the slot frees up may still get it and fail
	// their API call instead: either way a 503 within the deadline.
	if refused < n-2 || capped < 1 {
		t.Errorf("%d decisions refused (%d for want of a slot), want at least %d (and at least one for want of a slot)", refused, capped, n-2)
	}
	if got := metric(t, b, reviewsTotal, map[string]string{"result": "error"}) - errorsBefore; got < n-2 {
		t.Errorf(`%s{result="error"} rose by %v, want at least %d`, reviewsTotal, got, n-2)
	}
	// The slot is free again.
	decide(t, b, input("delete", newPod("team-a", "runner", "cap-after")), allow(`RoleBinding "offload/team-a"`))
}

// SIGTERM during a burst: /ready turns 503 during --web.shutdown-delay while decisions
// are still answered; every request the server took gets a complete, correct answer;
// later ones are refused at connect; the process exits 0.
func TestShutdownDuringBurst(t *testing.T) {
	b, p := faultBridge(t, "--web.shutdown-delay=1s", "--web.shutdown-timeout=10s", "--cache.denied-ttl=1s", "--log.level=info")
	// Reviews take 300ms, so decisions are in flight when the listener closes.
	p.Delay(300 * time.Millisecond)

	type tcase struct {
		in      func(worker, i int) map[string]any
		allowed bool
	}
	cases := []tcase{
		{func(w, i int) map[string]any {
			return input("delete", newPod("team-a", "runner", fmt.Sprintf("burst-%d-%d", w, i)))
		}, true},
		{func(w, i int) map[string]any {
			return input("create", newPod("team-a", "runner", fmt.Sprintf("burst-%d-%d", w, i)))
		}, true},
		{func(w, i int) map[string]any {
			return input("create", newPod("team-a", "other", fmt.Sprintf("burst-%d-%d", w, i)))
		}, false},
		{func(w, i int) map[string]any {
			return input("create", newPod("orphan", "runner", fmt.Sprintf("burst-%d-%d", w, i)))
		}, false},
		{func(w, i int) map[string]any {
			return input("create", newPod("project-b", "runner", fmt.Sprintf("burst-%d-%d", w, i)))
		}, true},
	}
	// A connection still in the kernel's accept queue when the listener closes is reset
	// (EOF or ECONNRESET at the client) without the server having read a byte: for the
	// client that is a refusal, not a lost answer. Each pod has its own name, so the log
	// tells the two apart: a reset request the server decided is a lost answer.
	type reset struct {
		worker, i int
		sent      time.Duration
		err       error
	}
	var resets []reset

	const workers, perWorker = 16, 400
	var (
		ok, wrong, refused, failed, afterSignal, completedAfterClose atomic.Int64
		mu                                                           sync.Mutex
		problems                                                     []string
		sigAt, firstRefusal                                          atomic.Int64 // unix nanos
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per request: a request either reaches a connection the
			// server accepted or fails at connect.
			client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := 0; i < perWorker && time.Since(start) < 20*time.Second; i++ {
				tc := cases[(w+i)%len(cases)]
				sent := time.Now()
				r, _, err := decideWithHeader(client, b, tc.in(w, i))
				if err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) {
						refused.Add(1)
						firstRefusal.CompareAndSwap(0, time.Now().UnixNano())
						return // the listener is closed: stop like a client that failed over
					}
					if s := sigAt.Load(); s != 0 && sent.UnixNano() > s && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
						mu.Lock()
						resets = append(resets, reset{w, i, sent.Sub(start), err})
						mu.Unlock()
						continue
					}
					failed.Add(1)
					problem("worker %d request %d (sent at %s, SIGTERM at %s): %v", w, i, sent.Sub(start), time.Duration(sigAt.Load()-start.UnixNano()), err)
					continue
				}
				if s := sigAt.Load(); s != 0 && sent.UnixNano() > s {
					afterSignal.Add(1)
				}
				if fr := firstRefusal.Load(); fr != 0 && time.Now().UnixNano() > fr {
					completedAfterClose.Add(1)
				}
				switch {
				case r.Status != http.StatusOK:
					failed.Add(1)
					problem("worker %d request %d: %s", w, i, r)
				case r.Result == nil || r.Result.Allowed == nil || r.Allowed() != tc.allowed:
					wrong.Add(1)
					problem("worker %d request %d: want allowed=%v, got %s", w, i, tc.allowed, r)
				default:
					ok.Add(1)
				}
			}
		}()
	}

	time.Sleep(1500 * time.Millisecond)
	okBefore := ok.Load()
	sigAt.Store(time.Now().UnixNano())
	if err := b.SendSignal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// /ready must turn 503 during the shutdown delay.
	readyCode, readyAfter := 0, time.Duration(0)
	readyClient := &http.Client{Timeout: 2 * time.Second}
	for time.Since(time.Unix(0, sigAt.Load())) < 3*time.Second {
		res, err := readyClient.Get(b.InternalURL + "/ready")
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			readyCode, readyAfter = res.StatusCode, time.Since(time.Unix(0, sigAt.Load()))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	code, err := b.WaitExit(20 * time.Second)
	exited := time.Since(time.Unix(0, sigAt.Load()))
	if err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}

	serverLog := b.Log()
	for _, r := range resets {
		if strings.Contains(serverLog, fmt.Sprintf(" pod=burst-%d-%d ", r.worker, r.i)) {
			failed.Add(1)
			problem("worker %d request %d (sent at %s): decided by the server, but the answer was lost: %v", r.worker, r.i, r.sent, r.err)
		}
	}
	t.Logf("burst: %d answered correctly (%d before SIGTERM, %d sent after it, %d completed after the listener closed), %d refused at connect, %d reset unread in the accept queue, %d failed, %d wrong; /ready %d after %s; exit %d after %s",
		ok.Load(), okBefore, afterSignal.Load(), completedAfterClose.Load(), refused.Load(), len(resets), failed.Load(), wrong.Load(), readyCode, readyAfter.Round(time.Millisecond), code, exited.Round(time.Millisecond))
	for _, pr := range problems {
		t.Error(pr)
	}
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Errorf("%d wrong decisions and %d failed requests during the shutdown", wrong.Load(), failed.Load())
	}
	if okBefore == 0 || afterSignal.Load() == 0 {
		t.Errorf("the burst did not straddle SIGTERM: %d answers before it, %d requests sent after it", okBefore, afterSignal.Load())
	}
	if refused.Load() == 0 {
		t.Errorf("no request was refused at connect after the listener closed (workers stopped by their bound first?)")
	}
	if readyCode != http.StatusServiceUnavailable {
		t.Errorf("/ready during the shutdown delay: want 503, got %d", readyCode)
	}
	if readyAfter > time.Second {
		t.Errorf("/ready turned %d only %s after SIGTERM, want within the 1s shutdown delay", readyCode, readyAfter)
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(b.Log(), "shutting down") {
		t.Errorf("no \"shutting down\" log line")
	}
}

// writeFileAtomically writes data to a temporary file next to path and renames it
// over path, so a reloader never reads half a file.
func writeFileAtomically(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reloadPolicyData is policyData with the team-a cpu cap as given.
func reloadPolicyData(cpuCap string) string {
	return strings.Replace(policyData, `"cpu": "2", "memory": "4Gi"`, `"cpu": "`+cpuCap+`", "memory": "4Gi"`, 1)
}

// waitMetric polls name{match} until cond holds; it returns the last value.
func waitMetric(t *testing.T, b *cluster.Bridge, name string, match map[string]string, cond func(float64) bool, what string) float64 {
	t.Helper()
	var v float64
	took, ok := poll(15*time.Second, 200*time.Millisecond, func() bool {
		v = metric(t, b, name, match)
		return cond(v)
	})
	if !ok {
		t.Fatalf("%s: %s%v = %v after %s", what, name, match, v, took)
	}
	return v
}

// --policies and --policies.data are reloaded; a broken .rego or data file is refused
// (metrics say so) and the last good policy keeps answering.
func TestReloadPolicyAndData(t *testing.T) {
	if policyData == reloadPolicyData("1") {
		t.Fatal("policyData no longer holds the team-a cap this test edits")
	}
	dir, dataDir := t.TempDir(), t.TempDir()
	src, err := os.ReadFile(filepath.Join(suite.root, "policies", "rego", "authz.rego"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authz.rego"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if suite.policyDir != "" { // SAR_BRIDGE_POLICIES: test the policy the suite tests
		files, _ := filepath.Glob(filepath.Join(suite.policyDir, "*.rego"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.rego") {
				continue
			}
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dataFile := filepath.Join(dataDir, "data.json")
	writeFileAtomically(t, dataFile, reloadPolicyData("2"))
	args := append(append([]string{}, baseMappings...),
		"--policies="+dir, "--policies.data="+dataFile, "--reload.interval=1s", "--log.level=debug")
	b := startTestBridge(t, suite.kubeconfig, args...)

	const (
		reloads = "sar_bridge_policy_reloads_total"
		gauge   = "sar_bridge_policy_last_reload_success"
	)
	success, failure := map[string]string{"result": "success"}, map[string]string{"result": "failure"}
	offloadA := `RoleBinding "offload/team-a"`
	bigIn := input("create", newPod("team-a", "runner", "reload-1", onlyContainers(container("work", "1500m", "1Gi"))))
	smallIn := input("create", newPod("team-a", "runner", "reload-2", onlyContainers(container("work", "500m", "1Gi"))))
	capDenial := []string{`container "work"`, `cap 1 for group "system:serviceaccounts:team-a"`}
	decide(t, b, bigIn, allow(offloadA))
	if g := metric(t, b, gauge, nil); g != 1 {
		t.Errorf("%s = %v at start, want 1", gauge, g)
	}

	// A lower cap flips the decision.
	s0 := metric(t, b, reloads, success)
	writeFileAtomically(t, dataFile, reloadPolicyData("1"))
	flipStart := time.Now()
	var last *cluster.Response
	took, ok := poll(10*time.Second, 100*time.Millisecond, func() bool {
		last, err = b.Decide(bigIn)
		return err == nil && last.Status == http.StatusOK && !last.Allowed()
	})
	if !ok {
		t.Fatalf("the decision did not flip within %s of lowering the cap; last %v %v", took, last, err)
	}
	checkDecision(t, last, deny(capDenial...))
	t.Logf("lowered cap applied after %s", time.Since(flipStart).Round(time.Millisecond))
	waitMetric(t, b, reloads, success, func(v float64) bool { return v > s0 }, "after the data change")

	steady := func(what string) {
		t.Helper()
		for range 3 {
			decide(t, b, bigIn, deny(capDenial...))
			decide(t, b, smallIn, allow(offloadA))
			time.Sleep(300 * time.Millisecond)
		}
		if t.Failed() {
			t.Fatalf("answers changed after %s", what)
		}
	}

	// A syntax error in a new .rego: refused, the last good policy keeps answering.
	f0 := metric(t, b, reloads, failure)
	broken := filepath.Join(dir, "zz-extra.rego")
	writeFileAtomically(t, broken, "package interlink.authz\n\nallow if {\n")
	waitMetric(t, b, reloads, failure, func(v float64) bool { return v > f0 }, "after a broken .rego")
	waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 0 }, "after a broken .rego")
	steady("a broken .rego")

	// Fixed: loaded, gauge back to 1, same answers.
	s1 := metric(t, b, reloads, success)
	writeFileAtomically(t, broken, "package interlink.extra\n\nanswer := 42\n")
	waitMetric(t, b, reloads, success, func(v float64) bool { return v > s1 }, "after fixing the .rego")
	waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 1 }, "after fixing the .rego")
	steady("the fixed .rego")

	// A data file that is not an object: refused; the cap of 1 still holds.
	f1 := metric(t, b, reloads, failure)
	writeFileAtomically(t, dataFile, `["not", "an", "object"]`)
	waitMetric(t, b, reloads, failure, func(v float64) bool { return v > f1 }, "after a broken data file")
	waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 0 }, "after a broken data file")
	steady("a broken data file")

	// Fixed data with the old cap: loaded, and the decision flips back.
	s2 := metric(t, b, reloads, success)
	writeFileAtomically(t, dataFile, reloadPolicyData("2"))
	waitMetric(t, b, reloads, success, func(v float64) bool { return v > s2 }, "after fixing the data file")
	waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 1 }, "after fixing the data file")
	decide(t, b, bigIn, allow(offloadA))
	if !strings.Contains(b.Log(), "policy reload rejected") {
		t.Errorf("no log line for the rejected reloads")
	}
}

const reloadMapNS = "e2e-reload-map"

const reloadMapFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: e2e-reload-map
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-reload-offloader
rules:
  - apiGroups: ["reload.interlink.io"]
    resources: ["pods"]
    verbs: ["create", "delete", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: e2e-reload-map
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-reload-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: e2e-reload-map}
`

// --openshift.mappings-file is reloaded: a new mapping makes a tenant's decisions
// reviewed; a broken file is refused and the last good mappings keep serving.
func TestReloadMappingsFile(t *testing.T) {
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, reloadMapFixtures)
	if err != nil {
		t.Fatal(err)
	}
	// The namespace stays: without a namespace controller a deleted one would stay
	// "terminating" and refuse the fixtures of a second run (-count=2).
	t.Cleanup(func() {
		_ = suite.cluster.Delete(context.Background(), cluster.Filter(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() != "Namespace" }))
	})
	if err := suite.cluster.WaitForAccess(ctx, sa(reloadMapNS, "runner"), cluster.ServiceAccountGroups(reloadMapNS),
		authorizationv1.ResourceAttributes{Namespace: reloadMapNS, Verb: "create", Group: "reload.interlink.io", Resource: "pods"}, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "mappings")
	writeFileAtomically(t, file, "# tenant=group\n")
	b := startTestBridge(t, suite.kubeconfig, baseArgs("--openshift.mappings-file="+file, "--reload.interval=1s", "--cache.denied-ttl=1s")...)

	const (
		reloads = "sar_bridge_mapping_reloads_total"
		gauge   = "sar_bridge_mapping_last_reload_success"
	)
	success, failure := map[string]string{"result": "success"}, map[string]string{"result": "failure"}
	runnerIn := input("create", newPod(reloadMapNS, "runner", "map-1"))
	otherIn := input("create", newPod(reloadMapNS, "other", "map-1"))
	binding := `RoleBinding "offload/e2e-reload-map" of ClusterRole "e2e-reload-offloader"`
	unmapped := `tenant "` + reloadMapNS + `"`

	decide(t, b, runnerIn, deny(unmapped))
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Errorf("unmapped tenant: %s = %v, want 0", reviewsTotal, got)
	}

	// Mapped: reviewed, allowed with the binding.
	s0 := metric(t, b, reloads, success)
	writeFileAtomically(t, file, "# tenant=group\ne2e-reload-map = reload.interlink.io\n")
	var last *cluster.Response
	took, ok := poll(10*time.Second, 100*time.Millisecond, func() bool {
		last, err = b.Decide(runnerIn)
		return err == nil && last.Status == http.StatusOK && last.Allowed()
	})
	if !ok {
		t.Fatalf("the new mapping was not used within %s; last %v %v", took, last, err)
	}
	t.Logf("new mapping used after %s", took.Round(time.Millisecond))
	checkDecision(t, last, allow(binding))
	decide(t, b, otherIn, deny(mayNot(sa(reloadMapNS, "other"), "create", "pods.reload.interlink.io", reloadMapNS)...))
	if got := metric(t, b, reviewsTotal, nil); got < 2 {
		t.Errorf("mapped tenant: %s = %v, want >= 2", reviewsTotal, got)
	}
	waitMetric(t, b, reloads, success, func(v float64) bool { return v > s0 }, "after adding a mapping")

	// Broken (and, if it were taken, dropping the mapping): refused, mapping kept.
	f0 := metric(t, b, reloads, failure)
	writeFileAtomically(t, file, "# tenant=group\nthis line is not a mapping\n")
	waitMetric(t, b, reloads, failure, func(v float64) bool { return v > f0 }, "after a broken mappings file")
	if metricExists(t, b, gauge) {
		waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 0 }, "after a broken mappings file")
	}
	for range 3 {
		decide(t, b, runnerIn, allow(binding))
		decide(t, b, otherIn, deny(mayNot(sa(reloadMapNS, "other"), "create", "pods.reload.interlink.io", reloadMapNS)...))
		time.Sleep(300 * time.Millisecond)
	}

	// A valid file without the mapping: loaded, the tenant is unmapped again.
	s1 := metric(t, b, reloads, success)
	writeFileAtomically(t, file, "# no tenants\n")
	waitMetric(t, b, reloads, success, func(v float64) bool { return v > s1 }, "after removing the mapping")
	if metricExists(t, b, gauge) {
		waitMetric(t, b, gauge, nil, func(v float64) bool { return v == 1 }, "after removing the mapping")
	}
	decide(t, b, runnerIn, deny(unmapped))
}

func metricExists(t *testing.T, b *cluster.Bridge, name string) bool {
	t.Helper()
	s, err := b.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return s.Has(name)
}
