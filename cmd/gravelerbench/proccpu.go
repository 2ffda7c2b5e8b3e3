package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. Linux fixes
// it at 100 for user space on every architecture it ships, whatever the
// kernel's own tick rate, so it is not read from sysconf (which Go does
// not expose without cgo).
const userHZ = 100

// pidsCPU is the CPU time (user and system, every thread) that the
// processes pids have used so far, from /proc/<pid>/stat, and whether
// every one of them reported it. It is how a run against separate
// processes (--etcd-pid, --server-pid) tells what each side of a
// comparison cost etcd and gravelerd, beside what it cost the load tool.
func pidsCPU(pids []int) (time.Duration, bool) {
	var total time.Duration
	for _, pid := range pids {
		d, err := pidCPU(pid)
		if err != nil {
			return 0, false
		}
		total += d
	}
	return total, len(pids) > 0
}

func pidCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(data)
}

// parseStatCPU reads utime and stime, the 14th and 15th fields of a
// /proc/<pid>/stat line. The second field, the command name in
// parentheses, may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStatCPU(data []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", data)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is the 3rd field (state); utime is the 14th, stime the 15th.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("stat: cpu field %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// pidList parses a comma-separated list of process ids ("" is none).
func pidList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return intList(s)
}
