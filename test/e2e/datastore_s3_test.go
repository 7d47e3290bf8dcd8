package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/testenv/s3test"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// Snapshots off the machine (issue 30): a real S3 server (versitygw, its
// own process, checking every request's AWS signature) receives the
// server's scheduled snapshots and `datastore snapshot`'s, and `datastore
// restore` reads them back into a fresh datastore.

// s3ServerFlags point a server's scheduled snapshots at bucket/prefix: over
// HTTPS with the store's CA file when it has one, else plain HTTP.
func s3ServerFlags(srv *s3test.Server, bucket, prefix, credentials string) []string {
	return append(s3Transport(srv, "--snapshot-s3-"),
		"--snapshot-s3-endpoint", srv.Endpoint, "--snapshot-s3-region", srv.Region,
		"--snapshot-s3-bucket", bucket, "--snapshot-s3-prefix", prefix, "--snapshot-s3-credentials-file", credentials)
}

// s3CLIFlags are the same for datastore snapshot|restore.
func s3CLIFlags(srv *s3test.Server, credentials string) []string {
	return append(s3Transport(srv, "--s3-"), "--s3-endpoint", srv.Endpoint, "--s3-region", srv.Region, "--s3-credentials-file", credentials)
}

func s3Transport(srv *s3test.Server, prefix string) []string {
	if srv.CAFile != "" {
		return []string{prefix + "cafile", srv.CAFile}
	}
	return []string{prefix + "insecure"}
}

// createClusters makes n labelled Clusters, 16 at a time, and returns
// their uids by name.
func createClusters(t *testing.T, c clientset.Interface, n int) map[string]string {
	t.Helper()
	var mu sync.Mutex
	uids := map[string]string{}
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				got, err := c.MusterV1alpha1().Clusters().Create(context.Background(), &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s3-%05d", i), Labels: map[string]string{"n": fmt.Sprint(i)}}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				uids[got.Name] = string(got.UID)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating clusters: %v", err)
	}
	return uids
}

// clusterUIDs reads every Cluster named s3-* with its uid.
func clusterUIDs(t *testing.T, c clientset.Interface) map[string]string {
	t.Helper()
	list, err := c.MusterV1alpha1().Clusters().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, x := range list.Items {
		if strings.HasPrefix(x.Name, "s3-") {
			out[x.Name] = string(x.UID)
		}
	}
	return out
}

// s3Objects lists the bucket under prefix, sorted.
func s3Objects(t *testing.T, srv *s3test.Server, bucket, prefix string) []string {
	keys := srv.Keys(t, bucket, prefix)
	slices.Sort(keys)
	return keys
}

var scheduledKey = regexp.MustCompile(`^site-a/muster-\d{8}T\d{6}\.\d{3}Z\.snapshot$`)

// TestDatastoreS3Snapshots: scheduled snapshots reach the bucket under the
// prefix, verified, the newest --snapshot-retention kept there; `datastore
// snapshot s3://...` uploads one on demand that retention leaves alone; a
// snapshot restored from the bucket into a fresh datastore serves the same
// objects under the deployment's token.
//
// The store speaks HTTPS with a certificate of a private CA
// (--snapshot-s3-cafile), as an operator's would.
func TestDatastoreS3Snapshots(t *testing.T) {
	t.Parallel()
	srv := s3test.StartTLS(t)
	srv.MakeBucket(t, "muster-backups")
	creds := srv.CredentialsFile(t, "")
	objects, _ := datastoreScale()
	s := startServer(t, "", append([]string{"--snapshot-interval", "2s", "--snapshot-retention", "2"}, s3ServerFlags(srv, "muster-backups", "site-a", creds)...)...)
	c := adminClient(t, s)
	start := time.Now()
	want := createClusters(t, c, objects)
	t.Logf("created %d clusters in %s", objects, time.Since(start).Round(time.Millisecond))

	// Uploads that start after the clusters exist hold them; four of them
	// also prove retention, which keeps 2.
	after := strings.Count(s.log.String(), "Scheduled snapshot uploaded")
	waitFor(t, 120*time.Second, "four scheduled uploads after the clusters were made", func() bool {
		return strings.Count(s.log.String(), "Scheduled snapshot uploaded") >= after+4
	})
	keys := s3Objects(t, srv, "muster-backups", "")
	// 2 kept, plus one uploaded but not yet pruned at most.
	if len(keys) < 2 || len(keys) > 3 {
		t.Errorf("the bucket holds %v, want the newest 2 scheduled snapshots", keys)
	}
	for _, k := range keys {
		if !scheduledKey.MatchString(k) {
			t.Errorf("object %s is not a scheduled snapshot under the prefix site-a/", k)
		}
	}
	if got := metricValue(t, s, "muster_snapshot_uploads_total"); got < 4 {
		t.Errorf("muster_snapshot_uploads_total = %v after four uploads", got)
	}
	if got := metricValue(t, s, "muster_snapshot_upload_failures_total"); got != 0 {
		t.Errorf("muster_snapshot_upload_failures_total = %v with every upload succeeding\n%s", got, s.log.String())
	}
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, "Scheduled snapshot uploaded") && !strings.Contains(line, `verified="SHA-256"`) {
			t.Errorf("an upload not verified by the SHA-256 the store keeps: %s", line)
		}
	}

	// On demand, against the running server: named on-demand-<time>, which
	// the schedule's retention does not delete.
	start = time.Now()
	out, err := datastoreCLI(s, nil, append([]string{"datastore", "snapshot", "s3://muster-backups/site-a/"}, s3CLIFlags(srv, creds)...)...)
	if err != nil {
		t.Fatalf("on-demand snapshot to S3: %v\n%s", err, out)
	}
	t.Logf("on-demand snapshot to S3 took %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	if !strings.Contains(out, "verified by SHA-256") {
		t.Errorf("the on-demand upload does not say it was verified:\n%s", out)
	}
	m := regexp.MustCompile(`s3://muster-backups/(site-a/on-demand-\S+\.snapshot)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the output names no on-demand object:\n%s", out)
	}
	onDemand := m[1]
	n := strings.Count(s.log.String(), "Scheduled snapshot uploaded")
	waitFor(t, 60*time.Second, "two more scheduled uploads", func() bool {
		return strings.Count(s.log.String(), "Scheduled snapshot uploaded") >= n+2
	})
	keys = s3Objects(t, srv, "muster-backups", "")
	if !slices.Contains(keys, onDemand) {
		t.Errorf("retention deleted the on-demand snapshot %s; the bucket holds %v", onDemand, keys)
	}

	// Restore the newest scheduled snapshot from the bucket into a fresh
	// data dir; a server on it, with the deployment's token, serves the
	// clusters with their uids.
	var newest string
	for _, k := range keys {
		if scheduledKey.MatchString(k) {
			newest = k
		}
	}
	tokenFile := writeSecretFile(t, serverToken(t, s))
	r := newServer(t, "127.0.0.1", "", "--token-file", tokenFile)
	tmp := t.TempDir()
	start = time.Now()
	out, err = datastoreCLI(r, []string{"TMPDIR=" + tmp}, append([]string{"datastore", "restore", "s3://muster-backups/" + newest}, s3CLIFlags(srv, creds)...)...)
	if err != nil {
		t.Fatalf("restore from S3: %v\n%s", err, out)
	}
	t.Logf("restore of s3://muster-backups/%s took %s: %s", newest, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	r.start()
	got := clusterUIDs(t, adminClient(t, r))
	if len(got) != len(want) {
		t.Errorf("the restored server has %d of the %d clusters", len(got), len(want))
	}
	for name, uid := range want {
		if got[name] != uid {
			t.Errorf("cluster %s: uid %q after the restore, %q before", name, got[name], uid)
			break
		}
	}
	// No copy of the snapshot (every object, the sealed CA) is left behind.
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) > 0 {
		t.Errorf("the restore left its download behind: %v", left)
	}
}

// TestDatastoreS3BadInputs: a wrong secret and a bucket that does not
// exist, each a clear error that changes nothing. The server's scheduled
// uploads fail as a SnapshotUploadFailed Event on its ServerEndpoint and
// in muster_snapshot_upload_failures_total while it keeps serving, and
// no object appears; `datastore snapshot` and `datastore restore` say
// what is wrong and leave the bucket and the target data dir as they were.
func TestDatastoreS3BadInputs(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	srv.MakeBucket(t, "muster-backups")
	const wrongSecret = "wrong-secret-must-not-leak-0123456789"
	for _, tc := range []struct {
		name, bucket, secret, want string
	}{
		{"wrong secret", "muster-backups", wrongSecret, "refused the secret key"},
		// (No quotes: klog escapes those of the command's error.)
		{"missing bucket", "no-such-bucket", "", "does not exist on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds := srv.CredentialsFile(t, tc.secret)
			s := startServer(t, "", append([]string{"--snapshot-interval", "1s"}, s3ServerFlags(srv, tc.bucket, "site-a", creds)...)...)
			c := adminClient(t, s)
			want := createClusters(t, c, 20)
			row := waitForEvent(t, s, "a SnapshotUploadFailed Event", func(r string) bool {
				return strings.Contains(r, "SnapshotUploadFailed") && strings.Contains(r, tc.want)
			})
			if !strings.HasPrefix(row, "Warning SnapshotUploadFailed ServerEndpoint/") {
				t.Errorf("the Event is not a Warning on the server's ServerEndpoint: %s", row)
			}
			if got := metricValue(t, s, "muster_snapshot_upload_failures_total"); got < 1 {
				t.Errorf("muster_snapshot_upload_failures_total = %v after a failed upload", got)
			}
			// Never a crash: the server serves on, and its local snapshots go on.
			if code, _, err := s.get("/readyz"); err != nil || code != 200 {
				t.Errorf("/readyz after failed uploads: %d %v", code, err)
			}
			if !strings.Contains(s.log.String(), "Scheduled snapshot taken") {
				t.Errorf("no local scheduled snapshot while uploads fail")
			}

			// On demand: the same error, said before the datastore is read.
			out, err := datastoreCLI(s, nil, append([]string{"datastore", "snapshot", "s3://" + tc.bucket + "/site-a/"}, s3CLIFlags(srv, creds)...)...)
			if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "nothing was written") {
				t.Errorf("on-demand snapshot: %v, want an error saying %q and that nothing was written:\n%s", err, tc.want, out)
			}
			// Restore: the same error, and the target data dir untouched.
			r := newServer(t, "127.0.0.1", "")
			out, err = datastoreCLI(r, nil, append([]string{"datastore", "restore", "s3://" + tc.bucket + "/site-a/muster-20260101T000000.000Z.snapshot"}, s3CLIFlags(srv, creds)...)...)
			if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "nothing was restored") {
				t.Errorf("restore: %v, want an error saying %q and that nothing was restored:\n%s", err, tc.want, out)
			}
			if entries, _ := os.ReadDir(r.dataDir); len(entries) != 0 {
				t.Errorf("the failed restore wrote into the target data dir: %v", entries)
			}

			if keys := srv.Keys(t, "muster-backups", ""); len(keys) != 0 {
				t.Errorf("objects in the bucket after failed uploads: %v", keys)
			}
			if got := clusterUIDs(t, c); len(got) != len(want) {
				t.Errorf("the server has %d of its %d clusters after failed uploads", len(got), len(want))
			}
			for _, text := range []string{s.log.String(), s.mustKubectl("get", "events", "-o", "yaml"), out} {
				if strings.Contains(text, wrongSecret) || strings.Contains(text, srv.Secret) {
					t.Errorf("a secret key appears in a log, an Event or an error")
				}
			}
		})
	}
}

// TestDatastoreS3ServerConfig: a server given a wrong object storage
// configuration refuses to start, saying what to fix, before it generates
// anything; none of these needs the store to be reached.
func TestDatastoreS3ServerConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "credentials-open")
	if err := os.WriteFile(open, []byte("[default]\naws_access_key_id = a\naws_secret_access_key = b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := writeSecretFile(t, "[default]\naws_access_key_id = a\naws_secret_access_key = b\n")
	bucket := []string{"--snapshot-s3-bucket", "muster-backups"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"credentials readable by others", append([]string{"--snapshot-interval", "1h", "--snapshot-s3-credentials-file", open}, bucket...), "readable by other users: run chmod 600"},
		{"a bucket without an interval", append([]string{"--snapshot-s3-credentials-file", good}, bucket...), "--snapshot-s3-bucket is set but --snapshot-interval is not"},
		{"plain HTTP not asked for", append([]string{"--snapshot-interval", "1h", "--snapshot-s3-credentials-file", good, "--snapshot-s3-endpoint", "http://127.0.0.1:9000"}, bucket...), "plain HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, "127.0.0.1", "", tc.args...)
			s.launch()
			select {
			case <-s.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("the server started with %v\n%s", tc.args, s.log.String())
			}
			if s.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(s.log.String(), tc.want) {
				t.Errorf("exit %d, want a failure saying %q:\n%s", s.cmd.ProcessState.ExitCode(), tc.want, s.log.String())
			}
			if _, err := os.Stat(filepath.Join(s.dataDir, "tls", "ca.crt")); !os.IsNotExist(err) {
				t.Errorf("a CA was generated for a server that refused its configuration (%v)", err)
			}
		})
	}
}
