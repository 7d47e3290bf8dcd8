package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/receiver"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// auditEvent is what the test reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Level      string `json:"level"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject json.RawMessage `json:"requestObject"`
}

func (e auditEvent) what() string {
	r := ""
	if e.ObjectRef != nil {
		r = e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			r += "/" + e.ObjectRef.Subresource
		}
		r += " " + e.ObjectRef.Name
	}
	return fmt.Sprintf("%s %s %s %s by %s", e.Level, e.Verb, r, e.RequestURI, e.User.Username)
}

// readAuditDir reads every audit event in dir's files (the log and its
// rotated backups) and returns them with the files' bytes.
func readAuditDir(t *testing.T, dir string) ([]auditEvent, string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var all bytes.Buffer
	var events []auditEvent
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		all.Write(b)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e auditEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events = append(events, e)
			}
		}
	}
	return events, all.String()
}

// webhookEvents are the audit events the receiver got (EventLists).
func webhookEvents(r *receiver.Receiver) []auditEvent {
	var out []auditEvent
	for _, rec := range r.Records() {
		var list struct {
			Items []auditEvent `json:"items"`
		}
		if json.Unmarshal(rec.Body, &list) == nil {
			out = append(out, list.Items...)
		}
	}
	return out
}

// TestAuditTrail (issue 31, "Audit trail"): a server started with
// kube-apiserver's audit flags and only a log path and a webhook (so the
// default policy) records, in a rotated 0600 log and at a real HTTPS
// receiver, a scenario's token create (with its request, the secret's
// hash but not the secret), join, plan change, exec through the tunnel,
// console sign-in and write and notification subscription, and none of the
// agent's status reports or watches; and no secret the scenario used (the
// join token, the node password, the plan's secret, the console token and
// its session cookie, the subscription's signing key) is anywhere in the
// log, its rotated backups or what the webhook got. (A role binding change,
// the fourth step, waits for the binding kind, which another
// branch adds.)
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	hook := receiver.Start(t, "")
	hookKubeconfig := filepath.Join(t.TempDir(), "audit-webhook.kubeconfig")
	if err := os.WriteFile(hookKubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: receiver
  cluster:
    server: %s/audit
    certificate-authority: %s
users:
- name: muster
contexts:
- name: default
  context: {cluster: receiver, user: muster}
current-context: default
`, hook.URL, hook.CAFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	auditDir := filepath.Join(t.TempDir(), "audit")
	auditLog := filepath.Join(auditDir, "audit.log")
	s := startServer(t, "",
		"--audit-log-path", auditLog, "--audit-log-maxsize", "1", "--audit-log-maxbackup", "5", "--audit-log-maxage", "7",
		"--audit-webhook-config-file", hookKubeconfig, "--audit-webhook-batch-max-wait", "1s")

	// The policy in force is the default, where an operator can read it.
	if b, err := os.ReadFile(filepath.Join(s.dataDir, "audit-policy.yaml")); err != nil || !strings.Contains(string(b), "kind: Policy") {
		t.Fatalf("the default audit policy in the data dir: %v\n%s", err, b)
	}
	if fi, err := os.Stat(auditLog); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit log %s: %v (mode %v), want 0600", auditLog, err, fi.Mode())
	}

	// 1. A join token, and a join with it.
	token := newToken(t, s)
	tokenSecret := token[strings.LastIndex(token, ".")+1:]
	agentDir := t.TempDir()
	a := startAgent(t, s, agentDir, "--token-file", writeTokenFile(t, token), "--node-name", "aud-1")
	a.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, s, "aud-1", "Running", 60*time.Second)
	nodePassword, err := os.ReadFile(filepath.Join(agentDir, "node-password"))
	if err != nil || len(strings.TrimSpace(string(nodePassword))) < 16 {
		t.Fatalf("the agent's node password: %v (%d bytes)", err, len(nodePassword))
	}

	// 2. A plan change carrying a secret, by an operator.
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	planSecret := "plansecret-" + randomHex(8)
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(planFile, []byte(fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlan
metadata:
  name: aud-1
spec:
  files:
  - path: %s
    content: "PASSWORD=%s\n"
    mode: 384
  instructions:
  - name: use
    command: /bin/sh
    args: ["-c", "echo %s >/dev/null"]
`, filepath.Join(agentDir, "app.env"), planSecret, planSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlAs(operator, "apply", "-f", planFile); err != nil {
		t.Fatalf("operator apply: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the plan to be applied", func() bool {
		out, _ := kubectlAs(operator, "get", "machineplan", "aud-1", "-o", "jsonpath={.status.state}")
		return out == "succeeded"
	})

	// 3. An exec through the machine's tunnel.
	if out, errOut, code := kubectlMuster(t, operator, "exec", "machine/aud-1", "--", "echo", "audited"); code != 0 || out != "audited\n" {
		t.Fatalf("exec: exit %d, %q %q", code, out, errOut)
	}

	// 4. A console sign-in, and a write with its session cookie.
	consoleTok := consoleToken(t, s, "carol", "muster:operators")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest(http.MethodPost, s.url()+"/console/session", strings.NewReader(`{"token":"`+consoleTok+`"}`))
	req.Header.Set("X-Muster-Console", "1")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("console sign-in: %v %v", err, resp)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "muster_console" {
			cookie = c
		}
	}
	if cookie == nil || len(cookie.Value) < 16 {
		t.Fatalf("console sign-in set no session cookie: %v", resp.Cookies())
	}
	req, _ = http.NewRequest(http.MethodPatch, s.url()+"/apis/muster.io/v1alpha1/machines/aud-1", strings.NewReader(`{"metadata":{"labels":{"audited":"yes"}}}`))
	req.Header.Set("X-Muster-Console", "1")
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.AddCookie(cookie)
	resp, err = client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a write with the console's session: %v %v", err, resp)
	}
	resp.Body.Close()

	// 5. A notification subscription, whose signing key is a secret too.
	signingKey := "sk-" + randomHex(24)
	applySubscription(t, operator, "audited", "https://127.0.0.1:9/hook", "", signingKey, 0, api.NotifyMachineFailed)

	// 6. A binding change: an admin gives a team a role on a cluster.
	bindingFile := filepath.Join(t.TempDir(), "binding.yaml")
	if err := os.WriteFile(bindingFile, []byte(bindingYAML("audited-team", "Viewer", "team-audit", "edge-east")), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("create", "-f", bindingFile)

	// Every step has its record, in the log and at the webhook.
	tokenID := tokenID(token)
	type want struct {
		name  string
		match func(e auditEvent) bool
	}
	wants := []want{
		{"the token's creation, with its request", func(e auditEvent) bool {
			return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "clusterregistrationtokens" && e.Level == "Request" &&
				strings.Contains(string(e.RequestObject), `"secretHash"`) && strings.Contains(string(e.RequestObject), tokenID)
		}},
		{"the join (a registration by the token)", func(e auditEvent) bool {
			return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "clusterregistrations" && e.User.Username == "muster:bootstrap:"+tokenID && e.Level == "Metadata"
		}},
		{"the plan change, by otto", func(e auditEvent) bool {
			return (e.Verb == "create" || e.Verb == "patch") && e.ObjectRef != nil && e.ObjectRef.Resource == "machineplans" && e.ObjectRef.Subresource == "" && e.User.Username == "otto" && e.Level == "Metadata"
		}},
		{"the exec, by otto", func(e auditEvent) bool {
			return e.ObjectRef != nil && e.ObjectRef.Resource == "machines" && e.ObjectRef.Subresource == "exec" && e.ObjectRef.Name == "aud-1" && e.User.Username == "otto" &&
				strings.Contains(e.RequestURI, "command=audited")
		}},
		{"the console sign-in", func(e auditEvent) bool {
			return e.Verb == "post" && strings.HasPrefix(e.RequestURI, "/console/session") && e.ResponseStatus != nil && e.ResponseStatus.Code == 200
		}},
		{"the console's write, by carol", func(e auditEvent) bool {
			return e.Verb == "patch" && e.ObjectRef != nil && e.ObjectRef.Resource == "machines" && e.User.Username == "carol"
		}},
		{"the subscription's creation, by otto", func(e auditEvent) bool {
			return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "notificationsubscriptions" && e.User.Username == "otto" && e.Level == "Metadata"
		}},
		{"the binding's creation, with who it grants what", func(e auditEvent) bool {
			return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "accessbindings" && e.Level == "Request" &&
				strings.Contains(string(e.RequestObject), "team-audit") && strings.Contains(string(e.RequestObject), "edge-east")
		}},
	}
	for _, source := range []struct {
		name   string
		events func() []auditEvent
	}{
		{"the audit log", func() []auditEvent { e, _ := readAuditDir(t, auditDir); return e }},
		{"the audit webhook", func() []auditEvent { return webhookEvents(hook) }},
	} {
		for _, w := range wants {
			waitFor(t, 30*time.Second, w.name+" in "+source.name, func() bool {
				for _, e := range source.events() {
					if w.match(e) {
						return true
					}
				}
				return false
			})
		}
	}

	// Rotation (--audit-log-maxsize 1): a megabyte and more of records
	// (refused deletes with long URIs, each one Metadata record) moves the
	// log to a backup, which keeps the log's 0600.
	pad := strings.Repeat("p", 7000)
	for i := 0; i < 170; i++ {
		if code, _ := adminRequest(t, s, "DELETE", fmt.Sprintf("/apis/muster.io/v1alpha1/machines/none-%d?pad=%s", i, pad)); code != http.StatusNotFound {
			t.Fatalf("padding delete: %d, want 404", code)
		}
	}
	var backups []string
	waitFor(t, 30*time.Second, "a rotated audit log", func() bool {
		backups, _ = filepath.Glob(filepath.Join(auditDir, "audit-*.log"))
		return len(backups) > 0
	})
	for _, f := range append(backups, auditLog) {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("audit log file %s: %v, mode %v; want 0600", f, err, fi.Mode())
		}
	}

	events, logText := readAuditDir(t, auditDir)
	// Nothing of the agent's routine: no status report, no read, no watch.
	for _, e := range events {
		if strings.HasPrefix(e.User.Username, "muster:machine:") && (e.Verb == "watch" || e.Verb == "get" || e.Verb == "list" ||
			(e.ObjectRef != nil && e.ObjectRef.Subresource == "status")) {
			t.Errorf("the agent's routine request was audited: %s", e.what())
		}
		if e.Level == "RequestResponse" || e.Level == "Request" && e.ObjectRef != nil && e.ObjectRef.Resource != "clusterregistrationtokens" && e.ObjectRef.Resource != "accessbindings" {
			t.Errorf("a body beyond a join token's request was audited: %s", e.what())
		}
	}
	t.Logf("%d audit events in the log", len(events))

	// No secret of the scenario anywhere: the log (and its backups) and
	// what the webhook received.
	hookText := hook.Raw()
	for name, secret := range map[string]string{
		"the join token":             token,
		"the join token's secret":    tokenSecret,
		"the node password":          strings.TrimSpace(string(nodePassword)),
		"the plan's secret":          planSecret,
		"the console token":          consoleTok,
		"the console session cookie": cookie.Value,
		"the subscription's key":     signingKey,
	} {
		if strings.Contains(logText, secret) {
			t.Errorf("%s is in the audit log", name)
		}
		if strings.Contains(hookText, secret) {
			t.Errorf("%s reached the audit webhook", name)
		}
	}
}
