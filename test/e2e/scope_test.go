package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// Roles scoped to clusters (issue 31): two teams, each bound by an
// AccessBinding to its own cluster, with real agents, real kubectl, real
// client certificates and a real console session.

// scopeFixture is a server with clusters team-a and team-b, a joined
// machine (a-1, b-1), a plan, a plan set and a pool in each, and the
// bindings: group team-a is Admin of team-a, group team-b Operator of
// team-b.
type scopeFixture struct {
	s          *server
	alice, bob string // kubeconfigs: alice in group team-a, bob in team-b
	dir        string
}

func (f *scopeFixture) create(t *testing.T, yaml string) {
	t.Helper()
	p := filepath.Join(f.dir, fmt.Sprintf("obj-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f.s.mustKubectl("create", "-f", p)
}

// file writes yaml for a user's kubectl -f.
func (f *scopeFixture) file(t *testing.T, name, yaml string) string {
	t.Helper()
	p := filepath.Join(f.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func bindingYAML(name, role, subjectGroup string, clusters ...string) string {
	return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: AccessBinding
metadata: {name: %s}
spec:
  role: %s
  subjects: [{kind: Group, name: %s}]
  scope: {clusters: [%s]}
`, name, role, subjectGroup, strings.Join(clusters, ", "))
}

func startScopeFixture(t *testing.T) *scopeFixture {
	t.Helper()
	s := startServer(t, "", processDriver)
	f := &scopeFixture{s: s, dir: t.TempDir()}
	for _, c := range []string{"a", "b"} {
		f.create(t, fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata: {name: team-%s, labels: {team: %s}}
---
apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata: {name: set-%s}
spec:
  cluster: team-%s
  selector: {matchLabels: {set: none}}
  template:
    files: [{path: /tmp/muster-scope-test-%s, content: "x\n", mode: 420}]
---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: pool-%s}
spec:
  cluster: team-%s
  replicas: 0
  template: {driver: process}
`, c, c, c, c, c, c, c))
	}
	f.create(t, bindingYAML("team-a-admin", "Admin", "team-a", "team-a"))
	f.create(t, bindingYAML("team-b-operator", "Operator", "team-b", "team-b"))
	f.alice = userKubeconfig(t, s, "alice", "team-a")
	f.bob = userKubeconfig(t, s, "bob", "team-b")
	return f
}

// regOf is the name of the registration of cluster's token, selected as
// a scoped user must: by spec.cluster.
func regOf(t *testing.T, kubeconfig, cluster string) string {
	t.Helper()
	var name string
	waitFor(t, 60*time.Second, "the registration of cluster "+cluster, func() bool {
		out, err := kubectlAs(kubeconfig, "get", "clusterregistrations", "--field-selector", "spec.cluster="+cluster, "-o", "jsonpath={.items[0].metadata.name}")
		name = strings.TrimSpace(out)
		return err == nil && name != ""
	})
	return name
}

// resourceVersions are every muster.io object's (and binding's) resource
// version, as the admin reads them: what "nothing changed" compares.
func resourceVersions(t *testing.T, s *server) map[string]string {
	t.Helper()
	rvs := map[string]string{}
	for _, r := range []string{"clusters", "machines", "machineplans", "machineplansets", "machinepools", "clusterregistrations", "clusterregistrationtokens", "accessbindings"} {
		out := s.mustKubectl("get", r, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if name, rv, ok := strings.Cut(line, "="); ok {
				rvs[r+"/"+name] = rv
			}
		}
	}
	return rvs
}

// consoleClient signs in to the console with a console token and returns
// a function that sends an API request as the console's page does (the
// session cookie and the console's header).
func consoleClient(t *testing.T, s *server, token string) func(method, path, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	req, _ := http.NewRequest(http.MethodPost, s.url()+"/console/session", strings.NewReader(fmt.Sprintf(`{"token":%q}`, token)))
	req.Header.Set("X-Muster-Console", "1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console sign-in: %d %s", resp.StatusCode, b)
	}
	cookies := resp.Cookies()
	return func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, s.url()+path, strings.NewReader(body))
		req.Header.Set("X-Muster-Console", "1")
		if body != "" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

// TestScopeTwoTeams: team a (alice, Admin of cluster team-a) sends a
// matrix of crafted requests against team b's objects: every one is
// refused (403) or selects nothing, and afterwards no object has changed.
// The same requests against team a's own objects succeed. Team b
// (bob, Operator of team-b) approves its own registration.
func TestScopeTwoTeams(t *testing.T) {
	t.Parallel()
	f := startScopeFixture(t)
	s := f.s
	var agents []*agentProc
	for _, c := range []string{"a", "b"} {
		tok := newToken(t, s, "--cluster", "team-"+c, "--manual-approval")
		agents = append(agents, startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, tok), "--node-name", c+"-1"))
	}
	regA, regB := regOf(t, f.alice, "team-a"), regOf(t, f.bob, "team-b")
	approve := []string{"patch", "clusterregistration", "", "--subresource", "status", "--type", "merge", "-p", `{"status":{"phase":"Approved"}}`}
	with := func(args []string, name string) []string { a := append([]string(nil), args...); a[2] = name; return a }

	// Approving the other team's registration is refused and changes nothing.
	if out, err := kubectlAs(f.alice, with(approve, regB)...); err == nil || !strings.Contains(out, "forbidden") {
		t.Fatalf("alice approving team b's registration: %v\n%s", err, out)
	}
	if phase := s.mustKubectl("get", "clusterregistration", regB, "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Fatalf("team b's registration is %s after alice's refused approval, want Pending", phase)
	}
	// Each team approves its own.
	for who, args := range map[string][]string{f.alice: with(approve, regA), f.bob: with(approve, regB)} {
		if out, err := kubectlAs(who, args...); err != nil {
			t.Fatalf("approving a registration of one's own cluster: %v\n%s", err, out)
		}
	}
	for _, a := range agents {
		a.waitOutput("opened the tunnel to the server", 60*time.Second)
	}
	for _, m := range []string{"a-1", "b-1"} {
		s.mustKubectl("apply", "-f", f.file(t, "plan-"+m, fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: MachinePlan\nmetadata: {name: %s}\nspec:\n  files: [{path: /tmp/muster-scope-plan-%s, content: \"x\\n\", mode: 420}]\n", m, m)))
	}
	// Alice signs in to the console too, with a console token.
	consoleAs := consoleClient(t, s, consoleToken(t, s, "alice", "team-a"))
	before := resourceVersions(t, s)

	// The requests, for team x: its cluster, machine, registration,
	// binding. Against team b every one must be refused or empty; against
	// team a (alice's own) every one must succeed. Destructive ones are
	// server-side dry runs in team a (authorization is the same).
	type target struct{ cluster, machine, reg, binding, dry string }
	b := target{"team-b", "b-1", regB, "team-b-operator", "--dry-run=none"}
	a := target{"team-a", "a-1", regA, "team-a-admin", "--dry-run=server"}
	type req struct {
		name string
		// kubectl args, or a console request (method, path, body).
		args    func(x target) []string
		console func(x target) (string, string, string)
		// plugin runs kubectl muster instead of kubectl.
		plugin bool
		// stateful: in team a the object's state may refuse it (a
		// granted registration is not denied); only a 403 fails there.
		stateful bool
	}
	kc := func(args ...string) func(x target) []string {
		return func(x target) []string {
			out := make([]string, len(args))
			for i, arg := range args {
				out[i] = strings.NewReplacer("CLUSTER", x.cluster, "MACHINE", x.machine, "REG", x.reg, "BINDING", x.binding, "DRY", x.dry, "SUFFIX", x.cluster[len(x.cluster)-1:]).Replace(arg)
			}
			return out
		}
	}
	tokenFile := func(x target) string {
		return f.file(t, "token-"+x.cluster, fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: ClusterRegistrationToken\nmetadata: {name: scope%s}\nspec: {cluster: %s, secretHash: \"sha256$2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"}\n", x.cluster[len(x.cluster)-1:], x.cluster))
	}
	grantMore := func(x target) string {
		return f.file(t, "more-"+x.cluster, bindingYAML("alice-more-"+x.cluster, "Admin", "team-a", x.cluster))
	}
	planSetFile := func(x target) string {
		return f.file(t, "set2-"+x.cluster, fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: MachinePlanSet\nmetadata: {name: extra-%s}\nspec:\n  cluster: %s\n  selector: {matchLabels: {set: none}}\n  template:\n    files: [{path: /tmp/x, content: \"x\\n\", mode: 420}]\n", x.cluster, x.cluster))
	}
	reqs := []req{
		{name: "get machine", args: kc("get", "machine", "MACHINE")},
		{name: "list machines with the other cluster's selector", args: kc("get", "machines", "--field-selector", "spec.cluster=CLUSTER")},
		{name: "watch machines", args: kc("get", "machines", "--field-selector", "spec.cluster=CLUSTER", "--watch", "--request-timeout=3s")},
		{name: "patch machine", args: kc("patch", "machine", "MACHINE", "DRY", "--type", "merge", "-p", `{"metadata":{"labels":{"hacked":"yes"}}}`)},
		{name: "delete machine", args: kc("delete", "machine", "MACHINE", "DRY", "--wait=false")},
		{name: "get machine plan", args: kc("get", "machineplan", "MACHINE")},
		{name: "list machine plans by name", args: kc("get", "machineplans", "--field-selector", "metadata.name=MACHINE")},
		{name: "patch machine plan", args: kc("patch", "machineplan", "MACHINE", "DRY", "--type", "merge", "-p", `{"spec":{"maxFailures":9}}`)},
		{name: "delete machine plan", args: kc("delete", "machineplan", "MACHINE", "DRY", "--wait=false")},
		{name: "machine history", args: kc("get", "--raw", "/apis/muster.io/v1alpha1/machines/MACHINE/history")},
		{name: "cluster history", args: kc("get", "--raw", "/apis/muster.io/v1alpha1/clusters/CLUSTER/history")},
		{name: "exec", plugin: true, args: kc("exec", "machine/MACHINE", "--", "true")},
		{name: "logs", plugin: true, args: kc("logs", "machine/MACHINE")},
		{name: "port-forward", args: kc("create", "--raw", "/apis/muster.io/v1alpha1/machines/MACHINE/portforward", "-f", "/dev/null")},
		{name: "get cluster", args: kc("get", "cluster", "CLUSTER")},
		{name: "list clusters by name", args: kc("get", "clusters", "--field-selector", "metadata.name=CLUSTER")},
		{name: "label cluster", args: kc("label", "cluster", "CLUSTER", "DRY", "hacked=yes")},
		{name: "delete cluster", args: kc("delete", "cluster", "CLUSTER", "DRY", "--wait=false")},
		{name: "cluster API proxy", args: kc("get", "--raw", "/k8s/clusters/CLUSTER/version")},
		{name: "get registration", args: kc("get", "clusterregistration", "REG")},
		{name: "list registrations of the cluster", args: kc("get", "clusterregistrations", "--field-selector", "spec.cluster=CLUSTER")},
		{name: "deny registration", stateful: true, args: kc("patch", "clusterregistration", "REG", "DRY", "--subresource", "status", "--type", "merge", "-p", `{"status":{"phase":"Denied"}}`)},
		{name: "delete registration", args: kc("delete", "clusterregistration", "REG", "DRY", "--wait=false")},
		{name: "list the cluster's join tokens", args: kc("get", "clusterregistrationtokens", "--field-selector", "spec.cluster=CLUSTER")},
		{name: "create a join token for the cluster", args: func(x target) []string { return []string{"create", "-f", tokenFile(x), x.dry} }},
		{name: "events of the machine", args: kc("get", "events", "--field-selector", "involvedObject.kind=Machine,involvedObject.name=MACHINE")},
		{name: "get plan set", args: kc("get", "machineplanset", "set-SUFFIX")},
		{name: "list plan sets of the cluster", args: kc("get", "machineplansets", "--field-selector", "spec.cluster=CLUSTER")},
		{name: "create a plan set in the cluster", args: func(x target) []string { return []string{"create", "-f", planSetFile(x), x.dry} }},
		{name: "patch pool", args: kc("patch", "machinepool", "pool-SUFFIX", "DRY", "--type", "merge", "-p", `{"spec":{"replicas":0}}`)},
		{name: "list pools of the cluster", args: kc("get", "machinepools", "--field-selector", "spec.cluster=CLUSTER")},
		{name: "a binding that grants itself more", args: func(x target) []string { return []string{"create", "-f", grantMore(x), x.dry} }},
		{name: "get the team's binding", args: kc("get", "accessbinding", "BINDING")},
		{name: "add oneself to the team's binding", args: kc("patch", "accessbinding", "BINDING", "DRY", "--type", "json", "-p", `[{"op":"add","path":"/spec/subjects/-","value":{"kind":"User","name":"alice"}}]`)},
		{name: "console: list machines", console: func(x target) (string, string, string) {
			return "GET", "/apis/muster.io/v1alpha1/machines?fieldSelector=spec.cluster%3D" + x.cluster, ""
		}},
		{name: "console: watch machines", console: func(x target) (string, string, string) {
			return "GET", "/apis/muster.io/v1alpha1/machines?watch=1&timeoutSeconds=1&fieldSelector=spec.cluster%3D" + x.cluster, ""
		}},
		{name: "console: get machine", console: func(x target) (string, string, string) {
			return "GET", "/apis/muster.io/v1alpha1/machines/" + x.machine, ""
		}},
		{name: "console: pause plan set", console: func(x target) (string, string, string) {
			p := "/apis/muster.io/v1alpha1/machineplansets/set-" + x.cluster[len(x.cluster)-1:]
			if x.dry == "--dry-run=server" {
				p += "?dryRun=All"
			}
			return "PATCH", p, `{"spec":{"strategy":{"paused":true}}}`
		}},
	}
	// And the requests no team may make unselected, whose answer would
	// hold the other team's objects.
	unscoped := [][]string{
		{"get", "machines"}, {"get", "machineplans"}, {"get", "clusters"}, {"get", "clusterregistrations"},
		{"get", "clusterregistrationtokens"}, {"get", "machineplansets"}, {"get", "machinepools"}, {"get", "events"},
		{"get", "accessbindings"}, {"get", "--raw", "/metrics"}, {"get", "machines", "--watch", "--request-timeout=3s"},
		// A machine's status is its agent's and the server's, in any scope.
		{"patch", "machine", "b-1", "--subresource", "status", "--type", "merge", "-p", `{"status":{"reason":"Hacked"}}`},
	}

	run := func(r req, x target) (bool, string) {
		if r.console != nil {
			code, body := consoleAs(r.console(x))
			return code < 300, fmt.Sprintf("HTTP %d %.300s", code, body)
		}
		var out string
		var err error
		if r.plugin {
			stdout, stderr, code := kubectlMuster(t, f.alice, r.args(x)...)
			out, err = stdout+stderr, nil
			if code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
		} else {
			out, err = kubectlAs(f.alice, r.args(x)...)
		}
		// A watch that is allowed ends by its own timeout.
		if err != nil && strings.Contains(out, "Client.Timeout") || err != nil && strings.Contains(out, "context deadline exceeded") {
			err = nil
		}
		return err == nil, out
	}
	refused := 0
	for _, r := range reqs {
		ok, out := run(r, b)
		switch {
		case !ok && (strings.Contains(out, "forbidden") || strings.Contains(out, "Forbidden") || strings.Contains(out, "HTTP 403")):
			refused++
		case ok && strings.Contains(out, "No resources found"):
			refused++ // empty: nothing of b's
		default:
			t.Errorf("team a against team b: %s: want 403 or nothing, got ok=%v:\n%s", r.name, ok, out)
		}
	}
	for _, args := range unscoped {
		out, err := kubectlAs(f.alice, args...)
		if err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("team a: kubectl %s: want 403, got %v:\n%s", strings.Join(args, " "), err, out)
			continue
		}
		refused++
	}
	if n := len(reqs) + len(unscoped); refused != n || n < 30 {
		t.Errorf("%d of %d crafted requests refused (want all, and at least 30)", refused, n)
	}
	// The refusal of an unselected list says how to select.
	if out, _ := kubectlAs(f.alice, "get", "machines"); !strings.Contains(out, "--field-selector spec.cluster=NAME") {
		t.Errorf("an unselected list's refusal does not say how to select:\n%s", out)
	}
	after := resourceVersions(t, s)
	for k, rv := range before {
		if strings.HasPrefix(k, "machines/") || strings.HasPrefix(k, "machineplans/") || strings.HasPrefix(k, "clusters/") {
			// The server itself writes these (heartbeats, plan status, counts): compare team b's by content below.
			continue
		}
		if after[k] != rv {
			t.Errorf("%s changed (resource version %s -> %s) after team a's refused requests", k, rv, after[k])
		}
	}
	// Team b's machine, plan and cluster: the fields team a tried to write are as they were.
	if out := s.mustKubectl("get", "machine", "b-1", "-o", "jsonpath={.metadata.labels.hacked}{.status.reason}"); strings.Contains(out, "acked") {
		t.Errorf("team b's machine was written by team a: %s", out)
	}
	if out := s.mustKubectl("get", "machineplan", "b-1", "-o", "jsonpath={.spec.maxFailures}"); out == "9" {
		t.Errorf("team b's plan was written by team a")
	}
	if out := s.mustKubectl("get", "cluster", "team-b", "-o", "jsonpath={.metadata.labels.hacked}"); out != "" {
		t.Errorf("team b's cluster was labelled by team a")
	}
	if out := s.mustKubectl("get", "accessbinding", "team-b-operator", "-o", "jsonpath={.spec.subjects[*].name}"); out != "team-b" {
		t.Errorf("team b's binding has subjects %q, want team-b alone", out)
	}
	var names []string
	for k := range after {
		if _, ok := before[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		t.Errorf("team a's refused requests made objects: %v", names)
	}

	// Inside the scope the same requests succeed. The cluster API proxy
	// answers that team-a has no Kubernetes API to reach (not a 403).
	for _, r := range reqs {
		ok, out := run(r, a)
		switch {
		case ok:
		case r.name == "cluster API proxy" && !strings.Contains(out, "forbidden"):
		case r.name == "port-forward" && !strings.Contains(out, "forbidden"):
			// A POST that is not an upgrade reaches the handler, which says so.
		case r.stateful && !strings.Contains(out, "forbidden"):
		default:
			t.Errorf("team a in its own cluster: %s: refused:\n%s", r.name, out)
		}
	}
}

// TestScopeWatchEndsWithBinding: a scoped user's open watch ends as soon
// as the binding that allowed it is changed to another cluster, and a new
// watch is refused; restoring the binding lets it watch again.
func TestScopeWatchEndsWithBinding(t *testing.T) {
	t.Parallel()
	f := startScopeFixture(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", f.alice)
	if err != nil {
		t.Fatal(err)
	}
	alice := versioned.NewForConfigOrDie(cfg).MusterV1alpha1()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "spec.cluster=team-a"}
	w, err := alice.MachinePools().Watch(ctx, opts)
	if err != nil {
		t.Fatalf("alice watching her cluster's pools: %v", err)
	}
	defer w.Stop()
	// The watch is live: it sees her pool's first event.
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended before any change")
		}
		t.Logf("watch open: %s %T", ev.Type, ev.Object)
	case <-time.After(30 * time.Second):
		t.Fatal("the watch delivered nothing in 30s")
	}
	start := time.Now()
	f.s.mustKubectl("patch", "accessbinding", "team-a-admin", "--type", "merge", "-p", `{"spec":{"scope":{"clusters":["team-b"]}}}`)
	ended := false
	for !ended {
		select {
		case _, ok := <-w.ResultChan():
			ended = !ok
		case <-time.After(30 * time.Second):
			t.Fatal("the open watch still runs 30s after its binding moved to another cluster")
		}
	}
	t.Logf("the watch ended %v after the binding changed", time.Since(start).Round(time.Millisecond))
	if _, err := alice.MachinePools().Watch(ctx, opts); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("a new watch after the binding moved: %v, want forbidden", err)
	}
	f.s.mustKubectl("patch", "accessbinding", "team-a-admin", "--type", "merge", "-p", `{"spec":{"scope":{"clusters":["team-a"]}}}`)
	waitFor(t, 30*time.Second, "alice watching again once her binding is back", func() bool {
		w2, err := alice.MachinePools().Watch(ctx, opts)
		if err != nil {
			return false
		}
		w2.Stop()
		return true
	})
}

// TestScopeConsole: in the real console (headless chromium), a user whose
// only access is an AccessBinding to cluster team-a sees team-a's machine,
// plan set and pool, and nothing of team-b's, and no refusal: the pages
// select the user's clusters in every list, as the API requires.
func TestScopeConsole(t *testing.T) {
	// Not parallel: a headless browser keeps a core busy.
	chromiumPath(t)
	f := startScopeFixture(t)
	s := f.s
	var agents []*agentProc
	for _, c := range []string{"a", "b"} {
		tok := newToken(t, s, "--cluster", "team-"+c)
		agents = append(agents, startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, tok), "--node-name", c+"-1"))
	}
	for _, a := range agents {
		a.waitOutput("running as machine", 60*time.Second)
	}
	ctx := browser(t, s)
	signIn(t, ctx, s, consoleToken(t, s, "alice", "team-a"))
	run(t, ctx, "the fleet page with team a's machine", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(`.row[data-name="a-1"]`)))
	if n := eval[int](t, ctx, `document.querySelectorAll('.row[data-name="b-1"]').length`); n != 0 {
		t.Errorf("alice's fleet page shows team b's machine")
	}
	if txt := eval[string](t, ctx, `document.body.innerText`); strings.Contains(strings.ToLower(txt), "forbidden") {
		t.Errorf("alice's fleet page shows a refusal:\n%s", txt)
	}
	open(t, ctx, s.url()+"/console/#/rollouts")
	run(t, ctx, "the rollouts page with team a's plan set and pool", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`.planset[data-name="set-a"]`)), chromedp.WaitVisible(chromedp.CSS(`.pool[data-name="pool-a"]`)))
	if n := eval[int](t, ctx, `document.querySelectorAll('[data-name="set-b"], [data-name="pool-b"]').length`); n != 0 {
		t.Errorf("alice's rollouts page shows team b's plan set or pool")
	}
	if txt := eval[string](t, ctx, `document.body.innerText`); strings.Contains(strings.ToLower(txt), "forbidden") {
		t.Errorf("alice's rollouts page shows a refusal:\n%s", txt)
	}
}
