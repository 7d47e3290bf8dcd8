package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestLimits: objects, requests, statuses, plans and node passwords past
// the limits are refused with 413 or 422 naming the limit, and nothing is
// stored. Before, an object over ~2 MiB in the datastore got 503
// "datastore is not answering" (kubectl retried it for 10 s), one of
// 1–2 MiB was stored, and so were a 1.4 MB condition with status Bogus, a
// setuid mode and a node password of 32 'a's.
func TestLimits(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	c := adminClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// htmlPlan carries n bytes of '<' in files of 8 KiB: each byte takes six
	// in the stored JSON ("\u003c"), so the stored object is ~6n while the
	// request and the plan's own bound (512 KiB of strings) see n.
	htmlPlan := func(name string, n int) *api.MachinePlan {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for i := 0; i < n/(8<<10); i++ {
			p.Spec.Files = append(p.Spec.Files, api.PlanFile{Path: fmt.Sprintf("/srv/www/page-%02d.html", i),
				Content: strings.Repeat("<", 8<<10)})
		}
		return p
	}
	cases := []struct {
		name   string
		create func() error
		object string // the object's name, which must not exist afterwards
		want   func(error) bool
		text   string
	}{
		{"plan stored as ~1.2 MB", func() error {
			_, err := c.MusterV1alpha1().MachinePlans().Create(ctx, htmlPlan("stored-1m", 200<<10), metav1.CreateOptions{})
			return err
		}, "stored-1m", apierrors.IsRequestEntityTooLargeError, "at most 1048576 (1 MiB)"},
		{"plan stored as ~3 MB", func() error {
			// Sent with '<' as is (client-go would escape it too), so the
			// 504 KiB body passes the request limit and the plan's bounds.
			var body bytes.Buffer
			enc := json.NewEncoder(&body)
			enc.SetEscapeHTML(false)
			p := htmlPlan("stored-3m", 504<<10)
			p.APIVersion, p.Kind = api.SchemeGroupVersion.String(), "MachinePlan"
			if err := enc.Encode(p); err != nil {
				return err
			}
			return c.MusterV1alpha1().RESTClient().Post().Resource("machineplans").
				SetHeader("Content-Type", "application/json").Body(body.Bytes()).Do(ctx).Error()
		}, "stored-3m", apierrors.IsRequestEntityTooLargeError, "at most 1048576 (1 MiB)"},
		{"request body of 2.5 MiB", func() error {
			cl := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "huge-body",
				Annotations: map[string]string{"example.com/blob": strings.Repeat("x", 2560<<10)}}}
			_, err := c.MusterV1alpha1().Clusters().Create(ctx, cl, metav1.CreateOptions{})
			return err
		}, "huge-body", apierrors.IsRequestEntityTooLargeError, "limit is 2097152"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.create()
			if !tc.want(err) || !strings.Contains(fmt.Sprint(err), tc.text) {
				t.Errorf("got %v (after %s); want %q", err, time.Since(start).Round(time.Millisecond), tc.text)
			}
			if _, err := c.MusterV1alpha1().MachinePlans().Get(ctx, tc.object, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a refused plan was stored: %v", err)
			}
			if _, err := c.MusterV1alpha1().Clusters().Get(ctx, tc.object, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a refused cluster was stored: %v", err)
			}
		})
	}

	t.Run("patch growing a plan past 1 MiB", func(t *testing.T) {
		if _, err := c.MusterV1alpha1().MachinePlans().Create(ctx, htmlPlan("grows", 8<<10), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var patch bytes.Buffer
		enc := json.NewEncoder(&patch)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]interface{}{"spec": map[string]interface{}{"files": htmlPlan("", 200<<10).Spec.Files}}); err != nil {
			t.Fatal(err)
		}
		err := c.MusterV1alpha1().RESTClient().Patch(types.MergePatchType).Resource("machineplans").Name("grows").
			Body(patch.Bytes()).Do(ctx).Error()
		if !apierrors.IsRequestEntityTooLargeError(err) || !strings.Contains(err.Error(), "at most 1048576 (1 MiB)") {
			t.Errorf("got %v, want 413 naming the 1 MiB limit", err)
		}
		if p, err := c.MusterV1alpha1().MachinePlans().Get(ctx, "grows", metav1.GetOptions{}); err != nil || len(p.Spec.Files) != 1 {
			t.Errorf("the refused patch changed the plan: %v", err)
		}
	})

	t.Run("1.4 MB condition in a machine's status", func(t *testing.T) {
		m, err := c.MusterV1alpha1().Machines().Create(ctx, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "cond"},
			Spec: api.MachineSpec{Cluster: "limits"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Bogus", Reason: "Flood",
			Message: strings.Repeat("x", 1400<<10), LastTransitionTime: metav1.Now()}}
		_, err = c.MusterV1alpha1().Machines().UpdateStatus(ctx, m, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 262144 bytes (256 KiB)") {
			t.Errorf("got %v, want 422 naming the 256 KiB status limit", err)
		}
		m.Status.Conditions[0].Message = "small"
		_, err = c.MusterV1alpha1().Machines().UpdateStatus(ctx, m, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `status.conditions[0].status: Unsupported value: "Bogus"`) {
			t.Errorf("got %v, want 422 refusing status Bogus", err)
		}
		got, err := c.MusterV1alpha1().Machines().Get(ctx, "cond", metav1.GetOptions{})
		if err != nil || len(got.Status.Conditions) != 0 {
			t.Errorf("a refused status was stored: %v, %d conditions", err, len(got.Status.Conditions))
		}
	})

	t.Run("setuid file mode", func(t *testing.T) {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "setuid"},
			Spec: api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/usr/local/bin/tool", Content: "#!/bin/sh\n", Mode: 0o4755}}}}
		_, err := c.MusterV1alpha1().MachinePlans().Create(ctx, p, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "between 0 and 0777") {
			t.Errorf("got %v, want 422 naming the allowed modes", err)
		}
	})

	t.Run("node passwords that are not 128 random bits", func(t *testing.T) {
		token := newToken(t, s)
		caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
		joiner := clientset.NewForConfigOrDie(&rest.Config{Host: s.url(),
			BearerToken: token[strings.Index(token, "::")+2:], TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
		for _, tc := range []struct{ password, want string }{
			{strings.Repeat("a", 32), "only 1 different hex digits"},
			{"0123456789abcdef0123456789abcdef", "different steps"},
			{"3f9c2a7e0b14d85c3f9c2a7e0b14d85c", "repeats a pattern of 16 characters"},
			{"correct-horse-battery-staple-yes", "hex digits (0-9, a-f) only"},
		} {
			node := "weak-" + tc.password[:4]
			err := createRegistration(ctx, joiner, node, func(r *api.ClusterRegistration) { r.Spec.NodePassword = tc.password })
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.password) {
				t.Errorf("password %q: got %v, want 422 saying %q without the password", tc.password, err, tc.want)
			}
			if _, err := c.MusterV1alpha1().NodePasswords().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a refused password was stored for %s: %v", node, err)
			}
		}
	})
}
