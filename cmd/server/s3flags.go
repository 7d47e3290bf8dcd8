package main

import (
	"github.com/spf13/pflag"

	"github.com/muster-io/muster/internal/snapshot/s3store"
)

// s3Flags are how an object store is reached, for the server's scheduled
// uploads (prefix "snapshot-s3-") and for datastore snapshot|restore
// (prefix "s3-", the bucket and prefix in an s3:// argument). There is no
// flag for the key: it comes from a file of mode 0600 or the environment,
// never a command line every local user can read.
func s3Flags(fl *pflag.FlagSet, c *s3store.Config, prefix string, withBucket bool) {
	fl.StringVar(&c.Endpoint, prefix+"endpoint", "s3.amazonaws.com", "S3-compatible object store: host[:port] or https://host[:port]")
	if withBucket {
		fl.StringVar(&c.Bucket, prefix+"bucket", "", "upload every scheduled snapshot (--snapshot-interval) to this bucket too, and keep the newest --snapshot-retention there; failures are SnapshotUploadFailed Events and muster_snapshot_upload_failures_total")
		fl.StringVar(&c.Prefix, prefix+"prefix", "", "folder in the bucket the snapshots go under, e.g. muster/site-a (default: the bucket's top level)")
	}
	fl.StringVar(&c.Region, prefix+"region", "", "the bucket's region (default: asked of the store; us-east-1 for most S3-compatible stores)")
	fl.BoolVar(&c.Insecure, prefix+"insecure", false, "speak plain HTTP to the object store, sending snapshots (the sealed CA, every object) in the clear: only on a trusted network")
	fl.StringVar(&c.CAFile, prefix+"cafile", "", "PEM file of the CA that signed the object store's certificate, trusted beside the system's")
	fl.StringVar(&c.CredentialsFile, prefix+"credentials-file", "", "file (mode 0600, AWS shared credentials format: [default] aws_access_key_id = ..., aws_secret_access_key = ...) holding the object store's key (default: $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY)")
}
