package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ProcessID is the bridge's process id (0 before it started).
func (b *Bridge) ProcessID() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// SendSignal delivers sig to the bridge process (e.g. syscall.SIGTERM).
func (b *Bridge) SendSignal(sig os.Signal) error {
	if b.cmd == nil || b.cmd.Process == nil {
		return errors.New("sar-bridge is not running")
	}
	return b.cmd.Process.Signal(sig)
}

// WaitExit waits up to timeout for the process to exit and returns its exit code (-1
// when it was killed by a signal).
func (b *Bridge) WaitExit(timeout time.Duration) (int, error) {
	select {
	case <-b.done:
	case <-time.After(timeout):
		return 0, fmt.Errorf("sar-bridge still running after %s", timeout)
	}
	if b.waitErr == nil {
		return 0, nil
	}
	var exitErr *exec.ExitError
	if errors.As(b.waitErr, &exitErr) {
		return exitErr.ExitCode(), nil
	}
	return 0, b.waitErr
}

// RSSKiB reads VmRSS of the bridge process from /proc (KiB).
func (b *Bridge) RSSKiB() (int64, error) {
	pid := b.ProcessID()
	if pid == 0 {
		return 0, errors.New("sar-bridge is not running")
	}
	return ProcessRSSKiB(pid)
}

// ProcessRSSKiB reads VmRSS of pid from /proc/<pid>/status (KiB).
func ProcessRSSKiB(pid int) (int64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
