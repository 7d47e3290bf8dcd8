package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/snapshot/s3store"
	"github.com/muster-io/muster/internal/store"
)

// objectStoreFor is the store of an s3://BUCKET/PREFIX/NAME argument and
// the NAME in it.
func objectStoreFor(c s3store.Config, arg string) (*s3store.Store, string, error) {
	bucket, key, err := s3store.ParseURL(arg)
	if err != nil {
		return nil, "", err
	}
	c.Bucket = bucket
	if strings.HasSuffix(key, "/") || key == "" {
		c.Prefix, key = strings.TrimSuffix(key, "/"), ""
	} else {
		c.Prefix, key = path.Split(key)
	}
	s, err := s3store.New(c)
	if err != nil {
		return nil, "", err
	}
	return s, key, nil
}

// snapshotToObjectStore takes a snapshot into a private temporary file and
// uploads it. The store is reached first, so that a wrong credential or a
// missing bucket is said before the datastore is read.
func snapshotToObjectStore(cmd *cobra.Command, cfg *server.Config, c s3store.Config, endpoint string, tlsFiles store.TLSFiles, arg string) error {
	ctx := cmd.Context()
	st, name, err := objectStoreFor(c, arg)
	if err != nil {
		return err
	}
	if name == "" {
		name = "on-demand-" + time.Now().UTC().Format("20060102T150405.000Z") + ".snapshot"
	}
	if err := st.Check(ctx); err != nil {
		return fmt.Errorf("%w; nothing was written", err)
	}
	tmp, err := os.MkdirTemp("", "muster-snapshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, name)
	res, err := takeSnapshot(ctx, cfg, endpoint, tlsFiles, file)
	if err != nil {
		return err
	}
	start := time.Now()
	up, err := st.Upload(ctx, file, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s; uploaded in %s, verified by %s %s\n", st.URL(name), res.Describe("snapshot of"), time.Since(start).Round(time.Millisecond), up.Verified, up.SHA256)
	return nil
}

// downloadSnapshot fetches s3://BUCKET/PREFIX/NAME into a private
// temporary file, checked against the store's checksum; cleanup removes it.
func downloadSnapshot(cmd *cobra.Command, c s3store.Config, arg string) (string, func(), error) {
	st, name, err := objectStoreFor(c, arg)
	if err != nil {
		return "", nil, err
	}
	if name == "" {
		return "", nil, fmt.Errorf("%s names no snapshot: give s3://BUCKET/PREFIX/NAME", arg)
	}
	tmp, err := os.MkdirTemp("", "muster-restore-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	start := time.Now()
	file, err := st.Download(cmd.Context(), name, tmp)
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%w; nothing was restored", err)
	}
	if fi, err := os.Stat(file); err == nil {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: downloaded %d bytes in %s\n", arg, fi.Size(), time.Since(start).Round(time.Millisecond))
	}
	return file, cleanup, nil
}
