package cluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// StartMemcachedOnPort is StartMemcached on a given loopback port, so a test can bring
// memcached back at the address its bridges were started with. A port still held by
// the previous process (or a socket in shutdown) is retried for a few seconds.
func StartMemcachedOnPort(logPath string, port int) (*Memcached, error) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return nil, fmt.Errorf("memcached is not installed (hack/deps.sh installs it): %w", err)
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "16", "-v"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses root without -u
	}
	deadline := time.Now().Add(10 * time.Second)
	var lastErr error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		fmt.Fprintf(lf, "# start %d: %s %v\n", attempt, bin, args)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			lf.Close()
			return nil, err
		}
		m := &Memcached{Addr: addr, cmd: cmd, done: make(chan struct{}), log: lf}
		go func() { _ = cmd.Wait(); close(m.done) }()
		if lastErr = m.waitListening(3 * time.Second); lastErr == nil {
			return m, nil
		}
		// Exited (most likely the port was still taken) or never listened: try again.
		select {
		case <-m.done:
		default:
			_ = cmd.Process.Kill()
			<-m.done
		}
		time.Sleep(200 * time.Millisecond)
	}
	lf.Close()
	return nil, fmt.Errorf("memcached could not start on %s (log %s): %v", addr, logPath, lastErr)
}

// Port returns the TCP port of m.Addr.
func (m *Memcached) Port() int {
	_, p, err := net.SplitHostPort(m.Addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Running reports whether the memcached process is still alive.
func (m *Memcached) Running() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Restart kills memcached if it still runs and starts a new one, empty, on the same
// address. m itself stays stopped; use the returned Memcached from then on.
func (m *Memcached) Restart(logPath string) (*Memcached, error) {
	m.Stop()
	return StartMemcachedOnPort(logPath, m.Port())
}

func (m *Memcached) waitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-m.done:
			return fmt.Errorf("memcached exited at start")
		default:
		}
		conn, err := net.DialTimeout("tcp", m.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			// A dial can succeed against the old process's lingering listener only if it
			// still runs; m.done tells whether ours died right after.
			select {
			case <-m.done:
				return fmt.Errorf("memcached exited at start")
			case <-time.After(50 * time.Millisecond):
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s: %w", m.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
