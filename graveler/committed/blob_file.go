package committed

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// A file:// namespace's Put and Get bypass fileblob's writer and reader:
// per object, fileblob stats the directory, creates a named temporary file
// and renames it, then tries to remove the temporary name again; a read
// stats the file and looks for an attributes sidecar before opening it.
// A commit writes and reads hundreds of small objects, and on a local file
// system the system calls of those writes were about half of its CPU
// time, the extra ones each a path lookup in a directory of many
// thousands of files. The files written are the ones fileblob writes
// (same paths, same bytes, no sidecar), so either reads what the other
// wrote.

// fileDirMode is fileblob's default mode for the directories it creates.
const fileDirMode = 0o777

// filePut stores data at p (a path under the namespace's directory)
// atomically: a reader sees the previous object or this one, whole.
func filePut(p string, data []byte) error {
	err := fileWrite(p, data)
	if errors.Is(err, fs.ErrNotExist) {
		// The object's directory does not exist yet: the first object
		// under a prefix.
		if err := os.MkdirAll(filepath.Dir(p), fileDirMode); err != nil {
			return err
		}
		err = fileWrite(p, data)
	}
	return err
}

// noTmpfile is set once the file system or kernel has refused an unnamed
// file (where fileWrite tries one), so later writes go straight to the
// rename.
var noTmpfile atomic.Bool

var fileTempSeq atomic.Uint64

// fileWriteRenamed writes data to a new temporary file next to p and
// renames it onto p, replacing any file there. A file it replaces may be
// durable already and named by a recorded commit (objects are content
// addressed, so a writer often stores an object again: a revert, the same
// commit on two branches), and renaming unsynced data over it can leave
// an empty file there after a crash on some file systems. So when p
// exists the new file is fsynced before it replaces p; a new name needs
// no fsync here, the writer's Syncer covers it.
func fileWriteRenamed(p string, data []byte) error {
	tmp := p + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + "-" + strconv.FormatUint(fileTempSeq.Add(1), 16) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = renameNoReplace(tmp, p)
		if errors.Is(err, fs.ErrExist) {
			if err = syncBeforeReplace(f); err == nil {
				err = os.Rename(tmp, p)
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// syncBeforeReplace fsyncs a file about to replace an object; a variable
// so that a test can tell it ran.
var syncBeforeReplace = (*os.File).Sync

// fileNotFound reports whether err from reading a path means no object is
// stored there: nothing at the path, a directory, or a path through a file.
func fileNotFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// fileReadAt returns length bytes of the file at p from offset, or an
// error wrapping io.ErrUnexpectedEOF when the file ends before them.
func fileReadAt(p string, offset, length int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The length comes from a reference, which may be damaged: nothing
	// is allocated for bytes the file does not hold.
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if offset > st.Size() || length > st.Size()-offset {
		return nil, &fs.PathError{Op: "read", Path: p, Err: io.ErrUnexpectedEOF}
	}
	buf := make([]byte, length)
	n, err := f.ReadAt(buf, offset)
	if n == len(buf) {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, &fs.PathError{Op: "read", Path: p, Err: err}
}
