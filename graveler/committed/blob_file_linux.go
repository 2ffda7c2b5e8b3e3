//go:build linux && (amd64 || arm64)

package committed

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// oTmpfile is O_TMPFILE on these architectures: an unnamed file in a
	// directory, given a name by linkat once it is complete.
	oTmpfile         = 0x400000 | syscall.O_DIRECTORY
	atSymlinkFollow  = 0x400
	atFDCWD          = -0x64
	procSelfFDPrefix = "/proc/self/fd/"
)

// fileWrite writes p as an unnamed file in its directory linked into
// place when it is complete, which costs fewer system calls and directory
// updates than a named temporary file renamed, and leaves no temporary
// name for a listing to see. Where p exists already (Put replaces and
// re-dates it) or unnamed files are unavailable it renames a temporary
// file instead.
func fileWrite(p string, data []byte) error {
	if noTmpfile.Load() {
		return fileWriteRenamed(p, data)
	}
	dir := p[:max(0, lastSlash(p))]
	fd, err := openRetry(dir, oTmpfile|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			return &fs.PathError{Op: "open", Path: dir, Err: err}
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL):
			noTmpfile.Store(true)
		}
		return fileWriteRenamed(p, data)
	}
	defer syscall.Close(fd)
	if err := writeFull(fd, data); err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if err := linkat(procSelfFDPrefix+strconv.Itoa(fd), p); err != nil {
		rerr := fileWriteRenamed(p, data)
		if rerr == nil && !errors.Is(err, syscall.EEXIST) {
			// The directory is there and p was not: linking unnamed
			// files is what fails here (no /proc, say).
			noTmpfile.Store(true)
		}
		return rerr
	}
	return nil
}

func lastSlash(p string) int {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return i
		}
	}
	return -1
}

func openRetry(p string, flags int, mode uint32) (int, error) {
	for {
		fd, err := syscall.Open(p, flags, mode)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

func writeFull(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return syscall.EIO
		}
		data = data[n:]
	}
	return nil
}

func linkat(oldpath, newpath string) error {
	o, err := syscall.BytePtrFromString(oldpath)
	if err != nil {
		return err
	}
	n, err := syscall.BytePtrFromString(newpath)
	if err != nil {
		return err
	}
	cwd := atFDCWD
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(cwd), uintptr(unsafe.Pointer(o)),
			uintptr(cwd), uintptr(unsafe.Pointer(n)), atSymlinkFollow, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// fileRead returns the bytes of the file at p with one open, one fstat
// and (for a file of the size fstat gave) one read.
func fileRead(p string) ([]byte, error) {
	fd, err := openRetry(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, &fs.PathError{Op: "read", Path: p, Err: syscall.EISDIR}
	}
	// Objects are never modified in place (a Put replaces the file, and
	// this descriptor keeps the one opened), so the size says when the
	// read is complete without a read to meet the end.
	buf := make([]byte, st.Size)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: p, Err: err}
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// fileSyncer makes the files written or touched under a namespace's
// directory durable with one syncfs of the directory's file system.
// Objects are written without an fsync each (one per object cost a
// 10M-entry commit about four times what this does); syncfs also covers
// the directory entries linkat and rename made, which an fsync of each
// file would not. Its descriptor is opened before the writes it syncs:
// syncfs reports a write-back failure on the file system to every
// descriptor opened before the failure (Linux 5.8 and later), even after
// another caller's syncfs reported it, where a descriptor opened later
// would not hear of it.
type fileSyncer struct {
	fd  int
	dir string
}

func newFileSyncer(dir string) (Syncer, error) {
	fd, err := openRetry(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &fileSyncer{fd: fd, dir: dir}, nil
}

func (f *fileSyncer) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.fd < 0 {
		return &fs.PathError{Op: "syncfs", Path: f.dir, Err: fs.ErrClosed}
	}
	for {
		err := unix.Syncfs(f.fd)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "syncfs", Path: f.dir, Err: err}
		}
		return nil
	}
}

// Close releases the descriptor once; a second Close does nothing, rather
// than close a descriptor number the process may have reused.
func (f *fileSyncer) Close() error {
	if f.fd < 0 {
		return nil
	}
	fd := f.fd
	f.fd = -1
	return syscall.Close(fd)
}

// noRenameNoReplace is set once a file system refused RENAME_NOREPLACE, so
// later renames skip the call (and fsync, as for a name taken).
var noRenameNoReplace atomic.Bool

// renameNoReplace renames tmp to p unless p exists (fs.ErrExist then, and
// where the file system cannot tell: the caller fsyncs, as if it did).
func renameNoReplace(tmp, p string) error {
	if noRenameNoReplace.Load() {
		return fs.ErrExist
	}
	for {
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, p, unix.RENAME_NOREPLACE)
		switch err {
		case nil:
			return nil
		case syscall.EINTR:
			continue
		case syscall.EEXIST:
			return fs.ErrExist
		case syscall.EINVAL, syscall.ENOSYS:
			noRenameNoReplace.Store(true)
			return fs.ErrExist
		}
		return &os.LinkError{Op: "rename", Old: tmp, New: p, Err: err}
	}
}
