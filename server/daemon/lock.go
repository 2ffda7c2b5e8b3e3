package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ErrDataDirInUse: another process (or another Run in this one) holds the
// data directory's lock.
var ErrDataDirInUse = errors.New("gravelerd: data directory in use")

// lockFileName is the lock a gravelerd with an embedded etcd holds in its
// data directory for as long as it runs.
const lockFileName = "gravelerd.lock"

// errWouldBlock is what tryLock returns when the lock is held elsewhere.
var errWouldBlock = errors.New("lock held")

// lockDataDir takes the data directory's lock without waiting. The
// embedded etcd's own lock on its database blocks a second process for
// ever without a word; this one makes the second process fail at once
// with a message naming the directory. The lock is released by unlock, or
// by the kernel when the process ends, so a crash leaves nothing to clean
// up. The file stays after unlock: removing it would let a process that
// had opened it before the removal and one that creates it afresh each
// hold a lock. Its content (the holder's pid) is only for an operator.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gravelerd: data directory lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: data directory %s is in use by another process (it holds %s)", ErrDataDirInUse, dir, path)
		}
		return nil, fmt.Errorf("gravelerd: data directory lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
