// Package s3store keeps datastore snapshots in S3-compatible object
// storage: off the machine whose disk they were taken from. A snapshot is
// uploaded in one PUT with its SHA-256, and the checksum the server stored
// is compared with the file's before the upload counts as done; one that
// differs is deleted. Retention keeps the newest scheduled snapshots under
// the prefix, as it does in the local snapshot directory. A download goes
// to a temporary file of mode 0600, checked against the stored checksum,
// that `muster-server datastore restore` then reads like any snapshot.
//
// Credentials come from a file of mode 0600 (the AWS shared credentials
// format) or from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: never from
// a command line, which every local user can read.
package s3store

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/muster-io/muster/internal/snapshot"
)

// Config says where snapshots go and how the store is reached.
type Config struct {
	// Endpoint is host[:port] of the S3 API, or a URL (https://host:port).
	// Empty: s3.amazonaws.com.
	Endpoint string
	Bucket   string
	// Prefix is the "folder" the snapshots are kept under, without a
	// leading slash; empty for the bucket's top level.
	Prefix string
	// Region is the bucket's region; empty lets the client ask the server.
	Region string
	// Insecure speaks plain HTTP: only for a store on a trusted network.
	Insecure bool
	// CAFile is a PEM bundle of the CAs that signed the store's serving
	// certificate, beside the system's.
	CAFile string
	// CredentialsFile holds the access key (AWS shared credentials
	// format); empty: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
	CredentialsFile string
}

// Enabled says whether snapshots go to object storage at all.
func (c Config) Enabled() bool { return c.Bucket != "" }

// Where names the bucket and prefix for messages: s3://bucket/prefix/.
func (c Config) Where() string {
	return "s3://" + path.Join(c.Bucket, c.Prefix) + "/"
}

// Store is a bucket and prefix snapshots are kept under.
type Store struct {
	cfg      Config
	client   *minio.Client
	endpoint string
}

// New checks cfg and the credentials and returns a Store. It does not
// reach the server: Check does.
func New(cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("no bucket: give the bucket the snapshots go to")
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	endpoint, secure, err := parseEndpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	creds, err := loadCredentials(cfg.CredentialsFile)
	if err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the object store's CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the object store's CA file %s holds no PEM certificate: give the CA that signed the store's serving certificate", cfg.CAFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:     creds,
		Secure:    secure,
		Region:    cfg.Region,
		Transport: transport,
		// minio-go sends an x-amz-checksum-* header only from a client
		// that may send checksums (the upload's SHA-256).
		TrailingHeaders: true,
		// Virtual-host style (bucket.host) on AWS, which is phasing out
		// path-style; path-style (host/bucket) elsewhere, which every
		// S3-compatible server takes without DNS for each bucket.
		BucketLookup: minio.BucketLookupAuto,
		MaxRetries:   3,
	})
	if err != nil {
		return nil, fmt.Errorf("the object store %s: %w", endpoint, err)
	}
	return &Store{cfg: cfg, client: client, endpoint: endpoint}, nil
}

// Config is the store's configuration.
func (s *Store) Config() Config { return s.cfg }

func parseEndpoint(raw string, insecure bool) (host string, secure bool, err error) {
	if raw == "" {
		raw = "s3.amazonaws.com"
	}
	secure = !insecure
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", false, fmt.Errorf("the object store endpoint %q is not host[:port] or scheme://host[:port]: give e.g. s3.example.com or https://s3.example.com:9000", raw)
		}
		switch u.Scheme {
		case "https":
		case "http":
			if !insecure {
				return "", false, fmt.Errorf("the object store endpoint %q is plain HTTP, which sends snapshots (the sealed CA, every object) in the clear: use https://, or say so with the insecure flag", raw)
			}
		default:
			return "", false, fmt.Errorf("the object store endpoint %q has scheme %q: use https:// (or http:// with the insecure flag)", raw, u.Scheme)
		}
		raw = u.Host
	}
	if _, _, err := net.SplitHostPort(raw); err != nil && strings.Contains(raw, ":") && !strings.HasPrefix(raw, "[") {
		return "", false, fmt.Errorf("the object store endpoint %q is not host[:port]: %v", raw, err)
	}
	return raw, secure, nil
}

// loadCredentials reads the access key from file (mode 0600, refused
// otherwise) or, with no file, from the environment.
func loadCredentials(file string) (*credentials.Credentials, error) {
	if file == "" {
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if id == "" || secret == "" {
			return nil, errors.New("no object store credentials: give a credentials file (AWS shared credentials format, mode 0600) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		return credentials.NewStaticV4(id, secret, os.Getenv("AWS_SESSION_TOKEN")), nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("the object store credentials file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the object store credentials file %s has mode %v, readable by other users: run chmod 600 %s (and consider rotating the key)", file, fi.Mode().Perm(), file)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("the object store credentials file: %w", err)
	}
	defer f.Close()
	id, secret, token, err := parseCredentials(f)
	if err != nil {
		return nil, fmt.Errorf("the object store credentials file %s: %w", file, err)
	}
	return credentials.NewStaticV4(id, secret, token), nil
}

// parseCredentials reads the [default] profile of an AWS shared
// credentials file (or keys outside any section). The file may hold other
// profiles; they are ignored.
func parseCredentials(r io.Reader) (id, secret, token string, err error) {
	section := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if section != "" && section != "default" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "aws_access_key_id":
			id = strings.TrimSpace(v)
		case "aws_secret_access_key":
			secret = strings.TrimSpace(v)
		case "aws_session_token":
			token = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", "", err
	}
	if id == "" || secret == "" {
		return "", "", "", errors.New("no aws_access_key_id and aws_secret_access_key in its [default] section: write them as\n[default]\naws_access_key_id = ...\naws_secret_access_key = ...")
	}
	return id, secret, token, nil
}

// Key is the object name of a snapshot called name under the prefix.
func (s *Store) Key(name string) string {
	if s.cfg.Prefix == "" {
		return name
	}
	return s.cfg.Prefix + "/" + name
}

// URL names a snapshot as `datastore restore` takes it.
func (s *Store) URL(name string) string { return "s3://" + s.cfg.Bucket + "/" + s.Key(name) }

// Check reaches the store and its bucket, so that a wrong credential or a
// missing bucket is said before a snapshot is taken or a datastore opened.
func (s *Store) Check(ctx context.Context) error {
	// A listing, not a HEAD of the bucket: a HEAD's answer has no body,
	// so a wrong secret and a denied key look alike.
	p := ""
	if s.cfg.Prefix != "" {
		p = s.cfg.Prefix + "/"
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range s.client.ListObjects(lctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: p, MaxKeys: 1}) {
		if o.Err != nil {
			return s.explain(o.Err, "")
		}
		break
	}
	return nil
}

func (s *Store) noBucket() error {
	return fmt.Errorf("bucket %q does not exist on %s: create it (e.g. aws s3 mb s3://%s), or give the right bucket", s.cfg.Bucket, s.endpoint, s.cfg.Bucket)
}

// explain turns the server's answer into what the operator can do about it.
func (s *Store) explain(err error, key string) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case minio.NoSuchBucket:
		return s.noBucket()
	case minio.NoSuchKey:
		return fmt.Errorf("no snapshot s3://%s/%s on %s: list the bucket for the snapshots it holds", s.cfg.Bucket, key, s.endpoint)
	case "InvalidAccessKeyId":
		return fmt.Errorf("the object store %s does not know the access key: check the credentials file (or AWS_ACCESS_KEY_ID): %s", s.endpoint, resp.Message)
	case "SignatureDoesNotMatch":
		return fmt.Errorf("the object store %s refused the secret key (the request's signature does not match): check aws_secret_access_key in the credentials file (or AWS_SECRET_ACCESS_KEY)", s.endpoint)
	case "BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest":
		return fmt.Errorf("the object store %s received s3://%s/%s damaged (its checksum differs from the snapshot's) and did not store it: %s; the next snapshot is uploaded anew", s.endpoint, s.cfg.Bucket, key, resp.Message)
	case "AccessDenied":
		return fmt.Errorf("the object store %s denied access to bucket %q (%s): check the credentials, and give the key permission to list, read, write and delete objects under %s", s.endpoint, s.cfg.Bucket, resp.Message, s.cfg.Where())
	}
	if resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("the object store %s refused the request (403 %s): check the credentials and the key's permissions on bucket %q", s.endpoint, resp.Code, s.cfg.Bucket)
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("the object store %s presents a certificate signed by a CA this machine does not trust: give that CA's PEM file with the cafile flag (--snapshot-s3-cafile, --s3-cafile)", s.endpoint)
	case errors.As(err, &hostname):
		return fmt.Errorf("the object store's certificate is not for %s (%v): give the endpoint by a name the certificate holds", s.endpoint, err)
	}
	return fmt.Errorf("the object store %s: %w; check the endpoint, and that the store is reachable from here", s.endpoint, err)
}

// Uploaded says what an upload stored.
type Uploaded struct {
	Key    string
	Bytes  int64
	SHA256 string // hex
	// Verified names the checksum the server's answer was compared with.
	Verified string
}

// Upload puts file under the prefix as name, in one PUT carrying its
// SHA-256, and checks the checksum the server stored. A snapshot larger
// than a single PUT allows (5 GiB on AWS) is refused by the server.
func (s *Store) Upload(ctx context.Context, file, name string) (Uploaded, error) {
	key := s.Key(name)
	f, err := os.Open(file)
	if err != nil {
		return Uploaded{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Uploaded{}, err
	}
	sum256, sumMD5, err := sums(f)
	if err != nil {
		return Uploaded{}, fmt.Errorf("reading %s: %w", file, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Uploaded{}, err
	}
	info, err := s.client.PutObject(ctx, s.cfg.Bucket, key, f, fi.Size(), minio.PutObjectOptions{
		ContentType: "application/x-ndjson",
		// The file's SHA-256 in the request's header: the server computes
		// its own over the body it receives and refuses the PUT when they
		// differ (BadDigest), so a damaged upload is never stored. (Sent as
		// a header rather than minio-go's signed trailer, which versitygw
		// refuses over plain HTTP.)
		UserMetadata:     map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(sum256)},
		DisableMultipart: true,
	})
	if err != nil {
		return Uploaded{}, s.explain(err, key)
	}
	up := Uploaded{Key: key, Bytes: fi.Size(), SHA256: hex.EncodeToString(sum256)}
	// The checksum the server stored, asked for again rather than taken
	// from the PUT's answer alone: what a restore will read.
	st, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		return up, s.explain(err, key)
	}
	stored := st.ChecksumSHA256
	if stored == "" {
		stored = info.ChecksumSHA256
	}
	switch {
	case stored != "":
		up.Verified = "SHA-256"
		if stored != base64.StdEncoding.EncodeToString(sum256) {
			err = fmt.Errorf("the object store %s stored s3://%s/%s with SHA-256 %s, the snapshot's is %s: the upload was damaged; it was deleted, and the next snapshot is uploaded anew", s.endpoint, s.cfg.Bucket, key, stored, base64.StdEncoding.EncodeToString(sum256))
		}
	case st.ETag != "" && !strings.Contains(st.ETag, "-"):
		// A store that keeps no SHA-256: a single PUT's ETag is its MD5.
		up.Verified = "MD5 (ETag)"
		if st.ETag != hex.EncodeToString(sumMD5) {
			err = fmt.Errorf("the object store %s stored s3://%s/%s with MD5 %s, the snapshot's is %s: the upload was damaged; it was deleted", s.endpoint, s.cfg.Bucket, key, st.ETag, hex.EncodeToString(sumMD5))
		}
	default:
		err = fmt.Errorf("the object store %s returned no checksum for s3://%s/%s (neither SHA-256 nor an MD5 ETag), so the upload cannot be verified; it was deleted: use a store that keeps S3 checksums", s.endpoint, s.cfg.Bucket, key)
	}
	if err == nil && st.Size != fi.Size() {
		err = fmt.Errorf("the object store %s stored %d bytes for s3://%s/%s, the snapshot has %d; it was deleted", s.endpoint, st.Size, s.cfg.Bucket, key, fi.Size())
	}
	if err != nil {
		// Nothing unverified stays behind to be restored from.
		if rmErr := s.client.RemoveObject(context.WithoutCancel(ctx), s.cfg.Bucket, key, minio.RemoveObjectOptions{}); rmErr != nil {
			err = fmt.Errorf("%w (deleting it failed too: %v; delete s3://%s/%s by hand)", err, rmErr, s.cfg.Bucket, key)
		}
		return Uploaded{}, err
	}
	return up, nil
}

func sums(r io.Reader) (sha, md []byte, err error) {
	h, m := sha256.New(), md5.New()
	if _, err := io.Copy(io.MultiWriter(h, m), r); err != nil {
		return nil, nil, err
	}
	return h.Sum(nil), m.Sum(nil), nil
}

// Object is a snapshot in the store.
type Object struct {
	Name         string // under the prefix
	Key          string
	Size         int64
	LastModified time.Time
}

// List returns the objects directly under the prefix whose names start
// with namePrefix and end in suffix, sorted by name.
func (s *Store) List(ctx context.Context, namePrefix, suffix string) ([]Object, error) {
	p := ""
	if s.cfg.Prefix != "" {
		p = s.cfg.Prefix + "/"
	}
	var out []Object
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: p + namePrefix}) {
		if o.Err != nil {
			return nil, s.explain(o.Err, "")
		}
		name := strings.TrimPrefix(o.Key, p)
		if strings.Contains(name, "/") || !strings.HasSuffix(name, suffix) {
			continue
		}
		out = append(out, Object{Name: name, Key: o.Key, Size: o.Size, LastModified: o.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Prune deletes all but the newest keep objects under the prefix named
// namePrefix*suffix; names sort by the time in them.
func (s *Store) Prune(ctx context.Context, namePrefix, suffix string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	objs, err := s.List(ctx, namePrefix, suffix)
	if err != nil {
		return nil, err
	}
	var removed []string
	for len(objs) > keep {
		if err := s.client.RemoveObject(ctx, s.cfg.Bucket, objs[0].Key, minio.RemoveObjectOptions{}); err != nil {
			return removed, s.explain(err, objs[0].Key)
		}
		removed = append(removed, objs[0].Name)
		objs = objs[1:]
	}
	return removed, nil
}

// Download reads the snapshot name under the prefix into a new temporary
// file (mode 0600) in dir ("" for the system's), checks it against the
// checksum the store keeps, and returns the file's path. The caller
// removes it.
func (s *Store) Download(ctx context.Context, name, dir string) (string, error) {
	key := s.Key(name)
	// First the bucket: a missing one would otherwise read as a missing
	// object, the HEAD of which says no more than 404.
	if err := s.Check(ctx); err != nil {
		return "", err
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{Checksum: true})
	if err != nil {
		return "", s.explain(err, key)
	}
	defer obj.Close()
	st, err := obj.Stat()
	if err != nil {
		return "", s.explain(err, key)
	}
	f, err := os.CreateTemp(dir, "muster-s3-snapshot-*")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), obj)
	if err != nil {
		// minio-go checks the body against the stored checksum as it reads.
		if strings.Contains(err.Error(), "checksum mismatch") {
			return "", s.damaged(key)
		}
		return "", fmt.Errorf("downloading s3://%s/%s: %w", s.cfg.Bucket, key, s.explain(err, key))
	}
	if n != st.Size {
		return "", fmt.Errorf("downloading s3://%s/%s: got %d bytes of %d; try again", s.cfg.Bucket, key, n, st.Size)
	}
	if st.ChecksumSHA256 != "" && st.ChecksumSHA256 != base64.StdEncoding.EncodeToString(h.Sum(nil)) {
		return "", s.damaged(key)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	ok = true
	return f.Name(), nil
}

func (s *Store) damaged(key string) error {
	return fmt.Errorf("s3://%s/%s does not match the SHA-256 the store keeps for it: the object or the download is damaged; try again, or restore another snapshot", s.cfg.Bucket, key)
}

// ParseURL splits s3://bucket/key into the bucket and the key.
func ParseURL(raw string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(raw, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3:// URL", raw)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q names no bucket: give s3://BUCKET/PREFIX/NAME", raw)
	}
	return bucket, key, nil
}

// IsURL says whether arg names an object rather than a file.
func IsURL(arg string) bool { return strings.HasPrefix(arg, "s3://") }

// UploadScheduled uploads a scheduled snapshot under its file name, then
// deletes all but the newest keep scheduled snapshots under the prefix.
// Snapshots of other names (on-demand ones) are never deleted.
func (s *Store) UploadScheduled(ctx context.Context, file string, keep int) (Uploaded, []string, error) {
	up, err := s.Upload(ctx, file, filepath.Base(file))
	if err != nil {
		return Uploaded{}, nil, err
	}
	removed, err := s.Prune(ctx, snapshot.ScheduledPrefix, snapshot.ScheduledSuffix, keep)
	if err != nil {
		return up, removed, fmt.Errorf("uploaded %s, but keeping the newest %d under %s failed: %w", s.URL(filepath.Base(file)), keep, s.cfg.Where(), err)
	}
	return up, removed, nil
}
