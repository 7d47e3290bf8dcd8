// Package atomicfile is the one way Muster replaces a file: readers, and a
// crash at any moment, see the old content or the new, never a part, and
// a secret is never readable by others, even for an instant.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data (see WriteFunc). Use mode 0600 for keys,
// tokens and kubeconfigs.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFunc(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc replaces path with what write writes: into a temporary file in
// the same directory, given mode before any byte is written (setuid,
// setgid and sticky included), fsynced, renamed over path, and the
// directory fsynced so that the rename itself survives a crash.
func WriteFunc(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes the file 0600; the final mode is set before any
	// byte is written.
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: setting its mode: %w", path, err)
	}
	if err = write(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: flushing to disk: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// Some filesystems cannot fsync a directory; the file is in place
	// either way, so that is not an error.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
