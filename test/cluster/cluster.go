package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configures Start.
type Options struct {
	// BinDir holds kube-apiserver and etcd.
	BinDir string
	// WorkDir holds the API server's certificates (kept across API server restarts so
	// tokens and CA bundles stay valid) and the control plane logs. Created if missing;
	// a temporary directory is used when empty.
	WorkDir string
	// StartTimeout bounds each component's start (default 90s: slow on 2 cores).
	StartTimeout time.Duration
	// StopTimeout bounds each component's stop (default 30s).
	StopTimeout time.Duration
	// DisableAdmissionPlugins are kube-apiserver admission plugins turned off (the
	// benchmarks turn off the defaults so that tens of thousands of pods are created
	// quickly).
	DisableAdmissionPlugins []string
	// Output receives etcd's and kube-apiserver's output; when nil it goes to
	// WorkDir/controlplane.log.
	Output io.Writer
}

// Cluster is a running envtest control plane with admin clients.
type Cluster struct {
	Env     *envtest.Environment
	Admin   *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  *restmapper.DeferredDiscoveryRESTMapper

	WorkDir string
	LogPath string

	ownWorkDir bool
	logFile    *os.File
	mu         sync.Mutex
	apiDown    bool
}

// Start starts etcd and kube-apiserver on free loopback ports (RBAC authorization,
// as envtest configures by default) and returns admin clients.
func Start(opts Options) (*Cluster, error) {
	c := &Cluster{WorkDir: opts.WorkDir}
	if c.WorkDir == "" {
		d, err := os.MkdirTemp("", "sar-bridge-cluster-")
		if err != nil {
			return nil, err
		}
		c.WorkDir, c.ownWorkDir = d, true
	}
	certDir := filepath.Join(c.WorkDir, "apiserver")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	out := opts.Output
	if out == nil {
		c.LogPath = filepath.Join(c.WorkDir, "controlplane.log")
		f, err := os.Create(c.LogPath)
		if err != nil {
			return nil, err
		}
		c.logFile, out = f, f
	}
	timeout, stopTimeout := opts.StartTimeout, opts.StopTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	if stopTimeout == 0 {
		stopTimeout = 30 * time.Second
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinDir,
		ControlPlaneStartTimeout: timeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	api := env.ControlPlane.GetAPIServer()
	// A fixed certificate directory survives APIServer.Stop, so a restarted API server
	// keeps its serving CA and its ServiceAccount signing key.
	api.CertDir = certDir
	api.Out, api.Err = out, out
	if len(opts.DisableAdmissionPlugins) > 0 {
		api.Configure().Set("disable-admission-plugins", strings.Join(opts.DisableAdmissionPlugins, ","))
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: out, Err: out}
	c.Env = env

	cfg, err := env.Start()
	if err != nil {
		// What did start (envtest leaves the control plane running when the default
		// namespace is late), so that a caller can try again.
		_ = env.Stop()
		c.cleanup()
		return nil, fmt.Errorf("starting the control plane (binaries in %s; log %s): %w", opts.BinDir, c.LogPath, err)
	}
	c.Admin = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		_ = c.Stop()
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	c.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return c, nil
}

// Stop stops the control plane and removes the working directory if Start created it.
func (c *Cluster) Stop() error {
	var err error
	if c.Env != nil {
		err = c.Env.Stop()
	}
	c.cleanup()
	return err
}

func (c *Cluster) cleanup() {
	if c.logFile != nil {
		_ = c.logFile.Close()
	}
	if c.ownWorkDir {
		_ = os.RemoveAll(c.WorkDir)
	}
}

// Host is the API server's URL (https://127.0.0.1:PORT).
func (c *Cluster) Host() string { return c.Admin.Host }

// StopAPIServer stops kube-apiserver only (etcd keeps running). kube-apiserver stops
// listening at once on SIGTERM but can take a long time to exit while long-running
// requests (the bridge's watches) drain, so it gets SIGTERM and, after grace, SIGKILL.
// It returns once the port refuses connections.
func (c *Cluster) StopAPIServer(grace time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiDown {
		return nil
	}
	api := c.Env.ControlPlane.APIServer
	pid, err := findProcess("kube-apiserver", "--cert-dir="+api.CertDir)
	if err != nil {
		return err
	}
	if err := terminate(pid, grace); err != nil {
		return err
	}
	// The process has exited; Stop now only resets envtest's bookkeeping.
	if err := api.Stop(); err != nil && !strings.Contains(err.Error(), "process already finished") {
		return err
	}
	c.apiDown = true
	addr := net.JoinHostPort(api.SecureServing.Address, api.SecureServing.Port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return nil
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver still accepts connections on %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreezeAPIServer stops (SIGSTOP) kube-apiserver so that connections to it hang
// instead of being refused. The returned function resumes it (SIGCONT).
func (c *Cluster) FreezeAPIServer() (thaw func() error, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pid, err := findProcess("kube-apiserver", "--cert-dir="+c.Env.ControlPlane.APIServer.CertDir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = syscall.Kill(pid, syscall.SIGCONT) })
		return err
	}, nil
}

// findProcess returns the pid of the process whose executable is named name and whose
// command line holds arg (a flag unique to a process this package started).
func findProcess(name, arg string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != name {
			continue
		}
		for _, a := range args[1:] {
			if a == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no running %s with %s", name, arg)
}

// terminate sends SIGTERM, then SIGKILL after grace, and waits until pid has exited
// (its parent, envtest, reaps it).
func terminate(pid int, grace time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %d: %w", pid, err)
	}
	exited := func() bool {
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return true
		}
		// Field 3 is the state; Z is a zombie not reaped yet: gone for our purposes.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
	}
	deadline := time.Now().Add(grace)
	for !exited() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Give envtest's waiter a moment to notice.
	time.Sleep(100 * time.Millisecond)
	return nil
}

// StartAPIServer starts kube-apiserver again on the same port with the same
// certificates and waits until it is healthy.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.apiDown {
		return nil
	}
	if err := c.Env.ControlPlane.APIServer.Start(); err != nil {
		return err
	}
	c.apiDown = false
	return nil
}

// Can asks the API server (as admin, through a SubjectAccessReview) whether user may
// perform the action. It is used to wait until RBAC objects reach the authorizer.
func (c *Cluster) Can(ctx context.Context, user string, groups []string, attrs authorizationv1.ResourceAttributes) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: &attrs,
	}}
	res, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}

// WaitForAccess polls Can until it returns want or the timeout passes.
func (c *Cluster) WaitForAccess(ctx context.Context, user string, groups []string, attrs authorizationv1.ResourceAttributes, want bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := c.Can(ctx, user, groups, attrs)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("access for %s to %+v did not become %v within %s (last: %v, err %v)", user, attrs, want, timeout, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ServiceAccountGroups returns the groups the API server gives a ServiceAccount token.
func ServiceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// ServiceAccountUser returns a ServiceAccount's user name.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}
