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

// Memcached is a memcached subprocess on a free loopback port.
type Memcached struct {
	Addr string // 127.0.0.1:PORT
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// StartMemcached starts Debian's memcached (hack/deps.sh installs it) on a free loopback
// port with 16 MiB of memory, logging to logPath.
func StartMemcached(logPath string) (*Memcached, error) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return nil, fmt.Errorf("memcached is not installed (hack/deps.sh installs it): %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "16", "-v"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses root without -u
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	m := &Memcached{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{}), log: lf}
	go func() { _ = cmd.Wait(); close(m.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", m.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return m, nil
		}
		select {
		case <-m.done:
			lf.Close()
			return nil, fmt.Errorf("memcached exited at start (log %s)", logPath)
		default:
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("memcached not listening on %s: %w", m.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills memcached and waits for it to exit.
func (m *Memcached) Stop() {
	select {
	case <-m.done:
	default:
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	_ = m.log.Close()
}
