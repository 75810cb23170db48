package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// TestLedgerChaos (issue 41): three replicas decide a stream of creates of one tenant
// while one replica is SIGKILLed and started again and the kube-apiserver is restarted
// once, with a quota charged exactly and one large enough for quota slices. The caller
// stores each pod it is allowed (as the API server would after admission) and sends a
// create again when it got no answer or a 503. At every moment the ledger's used pods
// plus the slices' room, and the allows answered, stay within hard; once the killed
// replica's slice is taken back and the others returned, the ledger equals the stored
// pods, each marked charged, with nothing pending; and the room left is exactly hard
// minus them.
func TestLedgerChaos(t *testing.T) {
	for _, c := range []chaosCase{
		// Under 64 pods of room no slice is granted: every create is charged exactly, and
		// since every create is answered in the end, exactly hard are allowed.
		{name: "exact", tenant: "lgr-chaos", hard: 40, creates: 120, killAt: 6, downAt: 16, exact: true},
		// Slices: the killed replica's slice is taken back after its lease expires (its
		// room meanwhile unusable: creates may be refused that it would fit).
		{name: "slices", tenant: "lgr-chaos-slices", hard: 300, creates: 450, killAt: 40, downAt: 120},
	} {
		t.Run(c.name, func(t *testing.T) { ledgerChaos(t, c) })
	}
}

// chaosCase is one run of TestLedgerChaos: the tenant's hard pods, the creates sent,
// after how many answers replica c is SIGKILLed and the kube-apiserver stopped, and
// whether exactly hard must be allowed (no slice can strand room).
type chaosCase struct {
	name, tenant                  string
	hard, creates, killAt, downAt int
	exact                         bool
}

func ledgerChaos(t *testing.T, c chaosCase) {
	const workers = 6
	tenant, hard, creates, killAt, downAt := c.tenant, c.hard, c.creates, int64(c.killAt), int64(c.downAt)
	lgTenantFor(t, "", tenant, nil, map[string]string{"pods": fmt.Sprint(hard)})
	// The pending timeout (how long a charge may wait for its pod before the reconciler
	// releases it) must outlast the API server's restart, during which the caller
	// cannot store the pods it was allowed: released earlier, their room would be
	// granted again and the pods stored later would overshoot (a 5s timeout did, with
	// 53 of 40). The replicas join the suite's shared bridge in its election (the
	// default lease namespace), so that one reconciler runs, as in one deployment. (Two
	// elections' reconcilers undercount when both recount a tenant: one recalculates
	// before its informer shows the pods the other just marked, 51 of 40 before the
	// elections' records, docs/tenants.md.)
	args := []string{"--quota.pending-timeout=60s", "--quota.reconcile-interval=2s"}
	replicas := []*atomic.Pointer[cluster.Bridge]{{}, {}, {}}
	for _, r := range replicas {
		r.Store(newBridge(t, args...))
	}

	// The watcher reads the tenant every 10ms (a watch can stay silent a long while
	// across the API server's restart): status.used pods and the slices' room never
	// over hard.
	ctx, stopWatch := context.WithCancel(context.Background())
	// A client of its own, not rate limited (the suite's is busy storing pods), whose
	// requests time out: one sent as the API server restarts can hang.
	cfg := rest.CopyConfig(suite.cluster.Admin)
	cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, time.Second
	watcher, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var maxUsed, versions, sliced atomic.Int64 // sliced: versions with a slice
	var traceMu sync.Mutex
	var trace []string // every version seen, printed when the test fails
	t.Cleanup(func() {
		if t.Failed() {
			traceMu.Lock()
			defer traceMu.Unlock()
			t.Logf("the tenant's status, version by version:\n%s", strings.Join(trace, "\n"))
		}
	})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		rv := ""
		for ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			u, err := watcher.Resource(tenantGVR).Get(ctx, tenant, metav1.GetOptions{})
			if err != nil {
				traceMu.Lock()
				if msg := err.Error(); len(trace) == 0 || !strings.HasSuffix(trace[len(trace)-1], msg) {
					trace = append(trace, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), msg))
				}
				traceMu.Unlock()
				continue // the API server down
			}
			if u.GetResourceVersion() == rv {
				continue // nothing new
			}
			rv = u.GetResourceVersion()
			var o v1alpha1.OffloadTenant
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o) != nil {
				continue
			}
			q := o.Status.Used[corev1.ResourcePods]
			held := q.Value() // used (pending included) and every slice's room
			for _, sl := range o.Status.Slices {
				room := sl.Amounts[corev1.ResourcePods]
				held += room.Value()
			}
			if held > maxUsed.Load() {
				maxUsed.Store(held)
			}
			versions.Add(1)
			if len(o.Status.Slices) > 0 {
				sliced.Add(1)
			}
			traceMu.Lock()
			trace = append(trace, fmt.Sprintf("%s rv %s: used pods %d, %d pending, %d slices, %d held", time.Now().Format("15:04:05.000"), rv, q.Value(), len(o.Status.Pending), len(o.Status.Slices), held))
			traceMu.Unlock()
		}
	}()

	var (
		mu          sync.Mutex
		allowed     []string
		refused     = map[string]int{}
		failures    = map[string]int{} // answers that are neither (503s), by first line
		lost        int                // sends without an answer (the replica killed), sent again
		unavailable int                // 503s (the API server down), sent again
		answered    atomic.Int64
		overAt      atomic.Int64 // allows answered beyond hard, seen at the moment of answering
	)
	began := time.Now()
	var stored sync.WaitGroup
	store := func(name string) {
		defer stored.Done()
		p := lgPod(tenant, name)
		p.Spec.NodeName = lgVK
		_, ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
			_, err := suite.cluster.Client.CoreV1().Pods(tenant).Create(context.Background(), p, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err)
		})
		if !ok {
			t.Errorf("storing the allowed pod %s: the API server never took it", name)
		}
	}
	var chaos sync.WaitGroup
	chaos.Add(2)
	onAnswer := func(n int64) {
		switch n {
		case killAt:
			go func() {
				defer chaos.Done()
				if err := replicas[2].Load().SendSignal(syscall.SIGKILL); err != nil {
					t.Errorf("SIGKILL: %v", err)
				}
				t.Logf("replica c SIGKILLed after %d answers", n)
				// Started again as Kubernetes would restart it: until it starts (it exits
				// while the API server it needs is down).
				time.Sleep(time.Second)
				for attempt := 1; ; attempt++ {
					b, err := startBridge("TestLedgerChaos-"+c.name+"-c-again", baseArgs(args...)...)
					stopAtCleanup(t, b)
					if err == nil {
						replicas[2].Store(b)
						t.Logf("replica c started again (attempt %d)", attempt)
						return
					}
					if attempt == 30 {
						t.Errorf("replica c never started again: %v", err)
						return
					}
					time.Sleep(time.Second)
				}
			}()
		case downAt:
			go func() {
				defer chaos.Done()
				if err := suite.cluster.StopAPIServer(2 * time.Second); err != nil {
					t.Errorf("stopping kube-apiserver: %v", err)
					return
				}
				t.Logf("kube-apiserver stopped after %d answers", n)
				time.Sleep(3 * time.Second)
				if err := suite.cluster.StartAPIServer(); err != nil {
					t.Errorf("restarting kube-apiserver: %v", err)
					return
				}
				t.Logf("kube-apiserver started again")
			}()
		}
	}

	next := atomic.Int64{}
	var senders sync.WaitGroup
	for range workers {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(creates) {
					return
				}
				name := fmt.Sprintf("chaos-%03d", i)
				// A create without an answer (its replica killed) or with a 503 (the
				// API server down) is sent again, to the next replica, as a client
				// retries: the ledger charges a pod once, so every create ends allowed
				// or refused.
				var o outcome
				for try := int(i); ; try++ {
					via := "abc"[try%3 : try%3+1]
					o = decideOutcome(replicas[try%3].Load(), via, name, lgCreate(tenant, name))
					if o.err == nil && o.status != http.StatusServiceUnavailable || time.Since(began) > 2*time.Minute {
						break
					}
					mu.Lock()
					if o.err != nil {
						lost++
					} else {
						unavailable++
					}
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
				n := answered.Add(1)
				mu.Lock()
				switch {
				case o.allowed:
					allowed = append(allowed, name)
					if len(allowed) > hard {
						overAt.Store(n)
					}
					stored.Add(1)
					go store(name)
				case o.status == http.StatusOK:
					refused[o.reason]++
				default:
					failures[strings.SplitN(o.reason, "\n", 2)[0]]++
				}
				mu.Unlock()
				onAnswer(n)
				time.Sleep(15 * time.Millisecond) // a stream, not one burst: the chaos happens during it
			}
		}()
	}
	senders.Wait()
	chaos.Wait()
	stored.Wait()
	t.Logf("%d creates in %v: %d allowed, refused %v, failed %v; sent again: %d without an answer, %d after a 503", creates,
		time.Since(began).Round(time.Millisecond), len(allowed), refused, failures, lost, unavailable)
	if answered.Load() < killAt || answered.Load() < downAt {
		t.Fatalf("only %d answers: the chaos never happened", answered.Load())
	}
	if len(allowed) > hard || overAt.Load() != 0 {
		t.Errorf("%d creates allowed (the %d-th answer went over), want at most %d", len(allowed), overAt.Load(), hard)
	}
	// Every create was answered in the end, so exactly the quota's worth was allowed: a
	// create sent again after its charge was written is that charge, not another.
	full := overQuota(tenant, hard+1, "pods", hard, hard, 1)
	if c.exact && (len(allowed) != hard || refused[full] != creates-hard || len(refused) != 1) || len(failures) != 0 {
		t.Errorf("allowed %d, refused %v, failed %v; want %d allowed and %d refused with %q", len(allowed), refused, failures, hard, creates-hard, full)
	}
	if lost == 0 || unavailable == 0 {
		t.Errorf("sent again: %d without an answer, %d after a 503; the chaos should cause both", lost, unavailable)
	}

	// Once the charges whose answers were lost are released, the ledger is the pods.
	var got ledgerState
	var slices int
	want := ledgerState{used: fmt.Sprintf("pods=%d", len(allowed)), pending: 0}
	took, ok := poll(90*time.Second, 250*time.Millisecond, func() bool {
		got, slices = ledgerOf(t, tenant, corev1.ResourcePods), len(tenantObject(t, tenant).Status.Slices)
		return got == want && slices == 0 // the killed replica's slice taken back, the others' returned
	})
	stopWatch()
	<-watched
	t.Logf("ledger %v after %v; %d versions of the status watched, the most pods used or sliced %d; %d versions with a slice", got, took.Round(time.Millisecond), versions.Load(), maxUsed.Load(), sliced.Load())
	if sliced.Load() == 0 != c.exact {
		t.Errorf("%d versions of the status held a slice; want some only with slices (exact: %v)", sliced.Load(), c.exact)
	}
	if !ok {
		t.Fatalf("the ledger settled at %v with %d slices, want %v and none (the %d pods stored)", got, slices, want, len(allowed))
	}
	if maxUsed.Load() > int64(hard) {
		t.Errorf("status.used and the slices reached %d pods, over hard %d", maxUsed.Load(), hard)
	}
	if versions.Load() < 5 || maxUsed.Load() < int64(len(allowed)) {
		t.Errorf("%d versions of the status watched, the most %d pods used, while %d are: the watch did not see the run", versions.Load(), maxUsed.Load(), len(allowed))
	}
	sort.Strings(allowed)
	if _, ok := poll(30*time.Second, 250*time.Millisecond, func() bool {
		return strings.Join(chargedPods(t, tenant, tenant), ",") == strings.Join(allowed, ",")
	}); !ok {
		t.Errorf("pods marked charged %v, want every allowed pod %v", chargedPods(t, tenant, tenant), allowed)
	}

	// The room left is exactly hard minus the stored pods: nothing leaked either way.
	b := replicas[0].Load()
	left := hard - len(allowed)
	for i := range left + 1 {
		name := fmt.Sprintf("after-%02d", i)
		r, err := b.Decide(lgCreate(tenant, name))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < left && !(r.Status == http.StatusOK && r.Allowed()):
			t.Fatalf("create %d of the %d left: %s, want allowed", i+1, left, r)
		case i == left && (r.Status != http.StatusOK || r.Allowed() || r.Reason() != overQuota(tenant, hard+1, "pods", hard, hard, 1)):
			t.Fatalf("the create past the quota: %s, want refused with %q", r, overQuota(tenant, hard+1, "pods", hard, hard, 1))
		}
	}
}
