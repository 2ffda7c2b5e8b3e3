//go:build chaos && linux

package chaos

import "syscall"

// childAttrs puts an etcd member in its own process group and has the
// kernel kill it if the test process dies without cleaning up (a panic,
// a timeout's os.Exit, SIGKILL).
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
