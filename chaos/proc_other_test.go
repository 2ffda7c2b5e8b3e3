//go:build chaos && !linux

package chaos

import "syscall"

// childAttrs puts an etcd member in its own process group. Without
// Linux's parent-death signal, only the test's cleanup kills it.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
