package main

import (
	"bytes"
	"os"
	"strconv"
)

// processIO is how many read and write system calls (of any kind: sockets,
// files, pipes) this process has made so far, from /proc/self/io, and
// whether the system reports them (Linux only). Beside CPU per call they
// show where a side's cost goes: a call that crosses two gRPC hops makes
// more system calls than one that crosses one, unless its writes and reads
// are batched.
func processIO() (reads, writes int64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0, false
	}
	var gotR, gotW bool
	for line := range bytes.Lines(data) {
		name, val, found := bytes.Cut(bytes.TrimSpace(line), []byte(": "))
		if !found {
			continue
		}
		n, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "syscr":
			reads, gotR = n, true
		case "syscw":
			writes, gotW = n, true
		}
	}
	return reads, writes, gotR && gotW
}
