package planner

import (
	"os/exec"
	"path"
	"reflect"
	"strings"
	"testing"

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
		machine: "m2", address: "10.0.0.2", stage: stage{etcdMember: 1, apiServer: true},
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
