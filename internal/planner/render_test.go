package planner

import (
	"crypto/x509"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestRenderStable: a plan rendered again from the plan it made is the
// same plan (its certificates are kept), so a pass that changes nothing
// restarts nothing; and a member's etcd joins the members before it.
func TestRenderStable(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	members := []member{{"m1", "10.0.0.1"}, {"m2", "10.0.0.2"}, {"m3", "10.0.0.3"}}
	in := renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"},
		machine: "m2", address: "10.0.0.2", stage: stage{etcdMember: 1, apiServer: true, controllers: true},
		members: members[:2], allMembers: members, pki: k, existing: map[string]string{}}
	first, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range first.Files {
		in.existing[path.Base(f.Path)] = f.Content
	}
	again, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Error("rendering the plan again from its own files changed it: it would restart the machine's processes on every pass")
	}
	files := map[string]string{}
	for _, f := range first.Files {
		files[path.Base(f.Path)] = f.Content
	}
	cmd := files["etcd.cmd"]
	for _, want := range []string{"--initial-cluster m1=https://10.0.0.1:2380,m2=https://10.0.0.2:2380 ", "--initial-cluster-state existing", "--listen-client-urls https://10.0.0.2:2379,https://127.0.0.1:2379"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("member 2's etcd command lacks %q:\n%s", want, cmd)
		}
	}
	if !strings.Contains(files["kube-apiserver.cmd"], "--etcd-servers=https://127.0.0.1:2379 ") {
		t.Errorf("a member's kube-apiserver does not talk to its own etcd member (so that members joining do not restart it):\n%s", files["kube-apiserver.cmd"])
	}
	cpOnly, err := render(renderInput{cluster: "c", spec: in.spec, machine: "c1", address: "10.0.0.7", stage: stage{etcdMember: -1, apiServer: true},
		allMembers: members, pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cpOnly.Files {
		if path.Base(f.Path) == "kube-apiserver.cmd" && !strings.Contains(f.Content, "--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379 ") {
			t.Errorf("a control-plane machine without etcd does not name every member:\n%s", f.Content)
		}
	}
	if files["etcd-join.sh"] == "" || first.Instructions[0].Name != "etcd-member-add" {
		t.Errorf("a joining member's plan does not add it to etcd before starting it: %+v", first.Instructions)
	}
	// A deleted member's drain plan removes it by its ID, in JSON etcd reads.
	leave, err := render(renderInput{cluster: "c", spec: in.spec, machine: "m3", address: "10.0.0.3", stage: stage{etcdMember: -1, leave: true},
		allMembers: members, pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range leave.Files {
		if path.Base(f.Path) == "etcd-leave.sh" && (!strings.Contains(f.Content, `member/remove -d "{\"ID\":\"$id\"}"`) || strings.Contains(f.Content, "10.0.0.3:2379")) {
			t.Errorf("the leave script does not remove the member by ID through the other members:\n%s", f.Content)
		}
	}
	if len(leave.Instructions) != 1 || leave.Instructions[0].Name != "etcd-member-remove" || len(leave.Probes) != 0 {
		t.Errorf("a leaving member's plan: %+v; want only the member removal", leave.Instructions)
	}
	// A worker's plan holds the CA certificate and its token, never a key.
	w, err := render(renderInput{cluster: "c", spec: in.spec, machine: "w1", address: "10.0.0.9", stage: stage{etcdMember: -1, worker: true},
		apiServer: "10.0.0.1", pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range w.Files {
		if strings.Contains(f.Content, "PRIVATE KEY") {
			t.Errorf("a worker's plan holds a private key in %s", f.Path)
		}
	}
}

// TestRenderControllers: a control-plane machine's plan gains
// kube-controller-manager and kube-scheduler, each with its own client
// certificate (the user Kubernetes' default RBAC binds) in a kubeconfig
// for the machine's own kube-apiserver, leader-elected, kcm signing with
// the cluster's CA; their /healthz probed on loopback ports that move
// with the cluster's kube-apiserver port.
func TestRenderControllers(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		apiPort                  int32
		wantAPI, wantKCM, wantSc string
	}{
		{0, "https://127.0.0.1:6443", "https://127.0.0.1:10257/healthz", "https://127.0.0.1:10259/healthz"},
		{7443, "https://127.0.0.1:7443", "https://127.0.0.1:11257/healthz", "https://127.0.0.1:11259/healthz"},
		{65000, "https://127.0.0.1:65000", "https://127.0.0.1:61182/healthz", "https://127.0.0.1:61184/healthz"},
	} {
		spec, err := render(renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", APIServerPort: tc.apiPort},
			machine: "m1", address: "10.0.0.1", stage: stage{etcdMember: 0, apiServer: true, controllers: true},
			members: []member{{"m1", "10.0.0.1"}}, allMembers: []member{{"m1", "10.0.0.1"}}, pki: k, bin: binSet{dir: "/opt/k8s"}, existing: map[string]string{}})
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		for _, f := range spec.Files {
			files[path.Base(f.Path)] = f.Content
			if strings.HasSuffix(f.Path, ".kubeconfig") && f.Mode != 0o600 {
				t.Errorf("%s has mode %o; a kubeconfig naming a key is 0600", f.Path, f.Mode)
			}
		}
		kcm := files["kube-controller-manager.cmd"]
		for _, want := range []string{"exec /opt/k8s/kube-controller-manager ", "--kubeconfig=/var/lib/muster-kubernetes/c/m1/controller-manager.kubeconfig",
			"--leader-elect=true", "--cluster-signing-cert-file=/var/lib/muster-kubernetes/c/m1/pki/signer-ca.crt", "--cluster-signing-key-file=/var/lib/muster-kubernetes/c/m1/pki/signer-ca.key",
			"--service-account-private-key-file=/var/lib/muster-kubernetes/c/m1/pki/sa.key", "--root-ca-file=/var/lib/muster-kubernetes/c/m1/pki/ca.crt",
			"--use-service-account-credentials=true", "--controllers=*,bootstrapsigner,tokencleaner", "--bind-address=127.0.0.1"} {
			if !strings.Contains(kcm, want) {
				t.Errorf("kube-controller-manager's command lacks %q:\n%s", want, kcm)
			}
		}
		// What kcm signs (the kubelets' client certificates) kube-apiserver
		// trusts, and etcd does not: etcd trusts the cluster's CA alone.
		if files["client-ca.crt"] != files["ca.crt"]+files["signer-ca.crt"] || files["signer-ca.crt"] == files["ca.crt"] ||
			!strings.Contains(files["kube-apiserver.cmd"], "--client-ca-file=/var/lib/muster-kubernetes/c/m1/pki/client-ca.crt ") ||
			!strings.Contains(files["etcd.cmd"], "--trusted-ca-file /var/lib/muster-kubernetes/c/m1/pki/ca.crt ") {
			t.Errorf("kube-apiserver's client CAs are not the cluster's CA and its CSR signer, or etcd trusts more than the cluster's CA:\n%s\n%s", files["kube-apiserver.cmd"], files["etcd.cmd"])
		}
		sched := files["kube-scheduler.cmd"]
		for _, want := range []string{"exec /opt/k8s/kube-scheduler ", "--kubeconfig=/var/lib/muster-kubernetes/c/m1/scheduler.kubeconfig", "--leader-elect=true", "--bind-address=127.0.0.1"} {
			if !strings.Contains(sched, want) {
				t.Errorf("kube-scheduler's command lacks %q:\n%s", want, sched)
			}
		}
		for name, cn := range map[string]string{"controller-manager": "system:kube-controller-manager", "scheduler": "system:kube-scheduler"} {
			if !strings.Contains(files[name+".kubeconfig"], "server: "+tc.wantAPI+"\n") {
				t.Errorf("%s.kubeconfig does not point at the machine's own kube-apiserver %s:\n%s", name, tc.wantAPI, files[name+".kubeconfig"])
			}
			certs, err := pki.ParseCertsPEM([]byte(files[name+".crt"]))
			if err != nil || certs[0].Subject.CommonName != cn {
				t.Errorf("%s.crt: %v; want a client certificate for %s", name, err, cn)
			} else if _, err := certs[0].Verify(x509.VerifyOptions{Roots: k.ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s.crt is not a client certificate of the cluster's CA: %v", name, err)
			}
		}
		probes := map[string]string{}
		for _, p := range spec.Probes {
			if p.HTTPGet != nil {
				probes[p.Name] = p.HTTPGet.URL
			}
		}
		if probes["kube-controller-manager"] != tc.wantKCM || probes["kube-scheduler"] != tc.wantSc || !strings.Contains(kcm, "--secure-port="+strings.TrimSuffix(tc.wantKCM[len("https://127.0.0.1:"):], "/healthz")+" ") {
			t.Errorf("apiServerPort %d: probes %v; want kube-controller-manager at %s, kube-scheduler at %s, on the ports they listen on", tc.apiPort, probes, tc.wantKCM, tc.wantSc)
		}
		var started []string
		for _, i := range spec.Instructions {
			started = append(started, i.Name)
		}
		if got := strings.Join(started, ","); !strings.HasSuffix(got, "kube-apiserver,kube-apiserver-serves-version,bootstrap-objects,kube-controller-manager-version,kube-scheduler-version,kube-controller-manager,kube-scheduler") {
			t.Errorf("instructions %s; want kube-controller-manager and kube-scheduler started after kube-apiserver, each after its version is checked", got)
		}
		for _, i := range spec.Instructions {
			if c, ok := strings.CutSuffix(i.Name, "-version"); ok && slices.Contains([]string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}, c) && (!strings.Contains(i.Args[1], "/opt/k8s/"+c+" --version") || !strings.Contains(i.Args[1], `"Kubernetes v1.37.2"`)) {
				t.Errorf("instruction %s does not check /opt/k8s/%s says v1.37.2:\n%s", i.Name, c, i.Args[1])
			}
		}
	}
}

// TestRenderWorker: a worker's plan waits for its CSR's certificate,
// writes the kubelet's kubeconfig with it, registers its Node with that
// credential, and is healthy only once the Node is there.
func TestRenderWorker(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	w, err := render(renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"}, machine: "w1", address: "10.0.0.9",
		stage: stage{etcdMember: -1, worker: true}, apiServer: "10.0.0.1", pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range w.Files {
		files[path.Base(f.Path)] = f.Content
	}
	if kc := files["kubelet.kubeconfig"]; !strings.Contains(kc, "client-certificate: /var/lib/muster-kubernetes/c/w1/kubelet.crt") || !strings.Contains(kc, "server: https://10.0.0.1:6443") {
		t.Errorf("kubelet.kubeconfig does not use the issued certificate against the control plane:\n%s", kc)
	}
	script := files["kubelet-bootstrap.sh"]
	for _, want := range []string{"umask 077", "{.status.certificate}", "base64 -d", "kind: Node", "name: w1", "--kubeconfig $d/kubelet.kubeconfig"} {
		if !strings.Contains(script, want) {
			t.Errorf("the kubelet bootstrap script lacks %q:\n%s", want, script)
		}
	}
	if len(w.Probes) != 1 || w.Probes[0].Exec == nil || !strings.Contains(strings.Join(w.Probes[0].Exec.Args, " "), "kubelet.kubeconfig get node w1") {
		t.Errorf("a worker's probes %+v; want one reading its Node with its own credential", w.Probes)
	}
}

// TestPKIFromPlanSigner: a new leader recovers the CSR signer from a plan
// that carries it; from a plan written before there was one, it makes one
// and says so (clusterPKI prefers a plan with the signer).
func TestPKIFromPlanSigner(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := render(renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"}, machine: "m1", address: "10.0.0.1",
		stage: stage{etcdMember: 0}, members: []member{{"m1", "10.0.0.1"}}, pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	got := pkiFromPlan(&api.MachinePlan{Spec: spec}, "c")
	if got == nil || got.signerNew || string(got.signer.CertPEM) != string(k.signer.CertPEM) {
		t.Fatalf("recovered PKI %+v; want the plan's CSR signer", got)
	}
	var old api.MachinePlanSpec
	for _, f := range spec.Files {
		if !strings.Contains(f.Path, "signer-ca.") {
			old.Files = append(old.Files, f)
		}
	}
	got = pkiFromPlan(&api.MachinePlan{Spec: old}, "c")
	if got == nil || !got.signerNew || got.signer == nil || string(got.ca.CertPEM) != string(k.ca.CertPEM) {
		t.Fatalf("recovered PKI from a plan without a signer: %+v; want the cluster's CA and a new signer", got)
	}
}

// TestServesVersionReadsVersion: the version gate reads gitVersion out
// of what kube-apiserver's /version serves (its sed, run on a real answer).
func TestServesVersionReadsVersion(t *testing.T) {
	script := renderInput{cluster: "c", machine: "m1", spec: api.ClusterKubernetes{Version: "v1.37.2"}}.servesVersion()
	i := strings.Index(script, "sed -n '")
	if i < 0 {
		t.Fatalf("no sed in the version gate:\n%s", script)
	}
	sed := script[i : i+strings.Index(script[i+8:], "'")+9]
	answer := "{\n  \"major\": \"1\",\n  \"gitVersion\": \"v1.37.2\",\n  \"gitCommit\": \"abc\"\n}\n"
	out, err := exec.Command("/bin/sh", "-c", "printf '%s' \"$1\" | "+sed, "sh", answer).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "v1.37.2" {
		t.Errorf("%s on /version's answer: %v %q; want v1.37.2", sed, err, out)
	}
}

// TestRenderRemove: a member removing a dead one gets a script that is
// valid shell and finds the dead member's ID in etcd's member list by its
// peer URL (the /v3 JSON gateway's answer, as etcd 3.4 prints it).
func TestRenderRemove(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	members := []member{{"m1", "10.0.0.1"}, {"m2", "10.0.0.2"}}
	spec, err := render(renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"},
		machine: "m2", address: "10.0.0.2", stage: stage{etcdMember: 1, apiServer: true, remove: "m1"}, removeAddress: "10.0.0.1",
		members: members, allMembers: members, pki: k, existing: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	var script string
	for _, f := range spec.Files {
		if path.Base(f.Path) == "etcd-remove.sh" {
			script = f.Content
		}
	}
	var names []string
	for _, in := range spec.Instructions {
		names = append(names, in.Name)
	}
	if script == "" || !strings.Contains(strings.Join(names, " "), "etcd etcd-member-remove kube-apiserver-version") {
		t.Fatalf("instructions %v, remove script %q; want etcd-member-remove after the member's own etcd", names, script)
	}
	if out, err := exec.Command("/bin/sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the remove script is not valid shell: %v: %s\n%s", err, out, script)
	}
	var idLine string
	for _, l := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "id=") {
			idLine = l
		}
	}
	list := `{"header":{"cluster_id":"1"},"members":[{"ID":"111","name":"m2","peerURLs":["https://10.0.0.2:2380"]},{"ID":"14630031542749784534","name":"m1","peerURLs":["https://10.0.0.1:2380"]}]}`
	out, err := exec.Command("/bin/sh", "-c", "list='"+list+"'\n"+idLine+"\necho \"$id\"").CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "14630031542749784534" {
		t.Errorf("the script finds member ID %q (%v); want m1's 14630031542749784534", got, err)
	}
	if !strings.Contains(script, `-d "{\"ID\":\"$id\"}"`) {
		t.Errorf("the remove request's body is not the JSON {\"ID\":\"<id>\"}:\n%s", script)
	}
}

// TestRenderMemberKeepsStartedCommand: an earlier member leaving moves a
// member's place, which changes only what its etcd's first start reads;
// its etcd command and join script stay as they are (a changed command
// would restart its etcd, and a changed plan be applied again).
func TestRenderMemberKeepsStartedCommand(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	members := []member{{"m1", "10.0.0.1"}, {"m2", "10.0.0.2"}, {"m3", "10.0.0.3"}}
	in := renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"},
		machine: "m3", address: "10.0.0.3", stage: stage{etcdMember: 2, apiServer: true},
		members: members, allMembers: members, pki: k, existing: map[string]string{}}
	first, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range first.Files {
		in.existing[path.Base(f.Path)] = f.Content
	}
	in.stage.etcdMember, in.members, in.allMembers = 1, members[1:], members[1:]
	again, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Error("the first member leaving changed member 3's plan: its etcd would restart and its plan be applied again")
	}
}
