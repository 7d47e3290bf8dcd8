package planner

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// BaseDir is where a machine's plan puts its Kubernetes files: one
// directory per cluster and machine, so that machines sharing a host (the
// process driver's) never share one.
const BaseDir = "/var/lib/muster-kubernetes"

// Ports of an etcd member on its machine's address.
const (
	etcdClientPort  = 2379
	etcdPeerPort    = 2380
	etcdMetricsPort = 2381 // loopback only, plain HTTP: the /health probe's
)

// Ports of kube-controller-manager and kube-scheduler (their /healthz),
// on the machine's loopback only, when the cluster's kube-apiserver has
// the default port: the upstream defaults. They move with
// spec.kubernetes.apiServerPort (controllerPorts), so that two clusters
// whose machines share a host (the process driver without network
// namespaces), told apart by their kube-apiserver ports, do not collide.
const (
	controllerManagerPort = 10257
	schedulerPort         = 10259
)

// certValidity is how long the certificates the planner issues last.
// Rotation is not planned yet (docs/clusters.md says so).
const certValidity = 365 * 24 * time.Hour

// clusterPKI is one cluster's secrets: its CA (which signs every
// certificate of the cluster: etcd's, kube-apiserver's, the clients'), the
// service-account signing key and the workers' bootstrap token. It lives
// in the plans of the cluster's etcd and control-plane machines (which
// need it, as an RKE2 server does), where plans are encrypted at rest when
// the server encrypts them and redacted for viewers, and is recovered
// from them by a new leader.
type clusterPKI struct {
	ca       *pki.CA
	caKeyPEM []byte
	// signer is the CA kube-controller-manager signs CSRs with (the
	// kubelets' client certificates): kube-apiserver trusts it for
	// clients beside ca, etcd does not. A certificate signed by ca is
	// accepted by etcd as a client and as a peer, so signing the workers'
	// with ca would hand every worker the cluster's etcd.
	signer       *pki.CA
	signerKeyPEM []byte
	// signerNew: recovered from a plan without a signer, which was made now.
	signerNew   bool
	saKeyPEM    []byte
	saPubPEM    []byte
	tokenID     string
	tokenSecret string
}

// Files of the PKI in a server machine's plan, under its pki/ directory.
const (
	fileCACert   = "ca.crt"
	fileCAKey    = "ca.key"
	fileSigner   = "signer-ca.crt"
	fileSignKey  = "signer-ca.key"
	fileClientCA = "client-ca.crt" // ca.crt and signer-ca.crt: kube-apiserver's --client-ca-file
	fileSAKey    = "sa.key"
	fileSAPub    = "sa.pub"
	fileToken    = "bootstrap-token"
	tokenIDChars = "abcdefghijklmnopqrstuvwxyz0123456789"
)

func newClusterPKI(cluster string) (*clusterPKI, error) {
	ca, err := pki.NewCA("kubernetes-ca-" + cluster)
	if err != nil {
		return nil, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	sa, saPEM, err := pki.NewPrivateKey()
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, err
	}
	id, err := randomString(6)
	if err != nil {
		return nil, err
	}
	secret, err := randomString(16)
	if err != nil {
		return nil, err
	}
	k := &clusterPKI{ca: ca, caKeyPEM: caKey, saKeyPEM: saPEM,
		saPubPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), tokenID: id, tokenSecret: secret}
	if err := k.newSigner(cluster); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *clusterPKI) newSigner(cluster string) error {
	signer, err := pki.NewCA("kubernetes-client-signer-" + cluster)
	if err != nil {
		return err
	}
	key, err := signer.KeyPEM()
	if err != nil {
		return err
	}
	k.signer, k.signerKeyPEM = signer, key
	return nil
}

// pkiFromPlan recovers a cluster's PKI from a server machine's plan. A
// plan written before the planner had a CSR signer gets a new one, which
// the next plans carry.
func pkiFromPlan(p *api.MachinePlan, cluster string) *clusterPKI {
	files := map[string]string{}
	for _, f := range p.Spec.Files {
		files[path.Base(f.Path)] = f.Content
	}
	ca, err := pki.LoadCA([]byte(files[fileCACert]), []byte(files[fileCAKey]))
	if err != nil || files[fileSAKey] == "" || files[fileSAPub] == "" {
		return nil
	}
	id, secret, ok := strings.Cut(strings.TrimSpace(files[fileToken]), ".")
	if !ok || len(id) != 6 || len(secret) != 16 {
		return nil
	}
	k := &clusterPKI{ca: ca, caKeyPEM: []byte(files[fileCAKey]), saKeyPEM: []byte(files[fileSAKey]),
		saPubPEM: []byte(files[fileSAPub]), tokenID: id, tokenSecret: secret}
	if signer, err := pki.LoadCA([]byte(files[fileSigner]), []byte(files[fileSignKey])); err == nil {
		k.signer, k.signerKeyPEM = signer, []byte(files[fileSignKey])
	} else if k.newSigner(cluster) != nil {
		return nil
	} else {
		k.signerNew = true
	}
	return k
}

// randomString is n characters a bootstrap token may hold ([a-z0-9]).
func randomString(n int) (string, error) {
	var b strings.Builder
	for range n {
		i, err := rand.Int(rand.Reader, big.NewInt(int64(len(tokenIDChars))))
		if err != nil {
			return "", err
		}
		b.WriteByte(tokenIDChars[i.Int64()])
	}
	return b.String(), nil
}

// Binaries are where a plan finds the programs it runs on the machine.
type Binaries struct {
	// Dir, when set, holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl on the
	// machines (--kubernetes-bin-dir): the local stand-in, used when
	// neither the cluster (spec.kubernetes.binaries) nor the server
	// (Assets) has binaries of a plan's version. Unset, with neither: the
	// machines' PATH.
	Dir string
	// Assets are the server's own binaries by version and platform
	// (--kubernetes-assets-dir), which plans download from ServerURL
	// trusting ServerCA. Nil: none.
	Assets AssetSource
	// ServerURL is the server's https URL as machines reach it.
	ServerURL string
	// ServerCA returns the CA bundle the server serves with.
	ServerCA func() []byte
}

// AssetSource is the server's Kubernetes binaries (install.KubernetesAssets).
type AssetSource interface {
	// Binaries returns the SHA-256 of each binary of version for
	// platform (<os>-<arch>), by name; none when it has none.
	Binaries(version, platform string) (map[string]string, error)
	// Versions lists the versions it has, for messages.
	Versions() []string
}

// BinDir is where a plan downloads the binaries of a version on its
// machine, one directory per version: machines of one host (the process
// driver's) share what they downloaded, each binary checked again by its
// SHA-256 before a plan uses it.
const BinDir = BaseDir + "/bin"

// binSet is where one machine's plan, at one version, finds its binaries.
type binSet struct {
	// dir holds them ("" = the machine's PATH).
	dir string
	// fetch are downloaded into dir, each checked by its SHA-256 before
	// anything runs it; none for the stand-in dir or PATH.
	fetch []api.KubernetesBinary
	// serverURL and serverCA: URLs under serverURL are fetched trusting
	// serverCA (the server's own CA), others the machine's system roots.
	serverURL string
	serverCA  []byte
}

func (b binSet) path(name string) string {
	if b.dir == "" {
		return name
	}
	return path.Join(b.dir, name)
}

// resolve says where a machine of platform (its status.platform) finds
// the binaries of version: pinned (the cluster's own list for that
// version), else the server's, else the stand-in dir or PATH. The error
// says why the version is not available.
func (b Binaries) resolve(version, platform string, pinned []api.KubernetesBinary) (binSet, error) {
	dir := path.Join(BinDir, version)
	if len(pinned) > 0 {
		return binSet{dir: dir, fetch: pinned, serverURL: b.ServerURL, serverCA: b.serverCA()}, nil
	}
	if b.Assets != nil {
		sums, err := b.Assets.Binaries(version, platformDir(platform))
		if err != nil {
			return binSet{}, fmt.Errorf("reading the server's Kubernetes binaries of %s: %w", version, err)
		}
		if len(sums) > 0 {
			set := binSet{dir: dir, serverURL: b.ServerURL, serverCA: b.serverCA()}
			names := make([]string, 0, len(sums))
			for n := range sums {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				set.fetch = append(set.fetch, api.KubernetesBinary{Name: n, URL: b.ServerURL + install.KubernetesAssetPath(version, platformDir(platform), n), Sha256: sums[n]})
			}
			return set, nil
		}
		if b.Dir == "" && b.Assets.Versions() != nil {
			return binSet{}, fmt.Errorf("Kubernetes %s is not available for %s: the server has no binaries of it in --kubernetes-assets-dir (it has %s) and the cluster pins none (spec.kubernetes.binaries): add <dir>/%s/%s/, pin the binaries, or choose a version it has",
				version, platformDir(platform), strings.Join(b.Assets.Versions(), ", "), version, platformDir(platform))
		}
	}
	return binSet{dir: b.Dir}, nil
}

func (b Binaries) serverCA() []byte {
	if b.ServerCA == nil {
		return nil
	}
	return b.ServerCA()
}

// needs are the binaries a stage's plan runs.
func (s stage) needs() []string {
	var n []string
	if s.etcdMember >= 0 && !s.leave {
		n = append(n, "etcd")
	}
	if s.apiServer {
		n = append(n, "kube-apiserver", "kubectl")
	}
	if s.controllers {
		n = append(n, "kube-controller-manager", "kube-scheduler")
	}
	if s.worker {
		n = append(n, "kubectl")
	}
	return n
}

// member is an etcd member as another machine's plan names it.
type member struct{ name, address string }

// renderInput is everything one machine's plan is made from.
type renderInput struct {
	cluster string
	spec    api.ClusterKubernetes
	machine string
	address string
	stage   stage
	// members are the etcd members up to and including this machine, in
	// join order, for its etcd; allMembers every member, for its
	// kube-apiserver; apiServer the address a worker's kubelet talks to.
	members    []member
	allMembers []member
	apiServer  string
	pki        *clusterPKI
	bin        binSet
	// removeAddress is the address of stage.remove, the dead member this
	// machine's plan removes from etcd.
	removeAddress string
	// drain and uncordon are the workers this control-plane machine's
	// plan drains and uncordons for a version change (the drainer is the
	// first control-plane machine); drainTimeout bounds one drain.
	drain, uncordon []string
	drainTimeout    int32
	// existing is the machine's current plan's files by base name: a
	// certificate that is still right is kept, so that a plan does not
	// change (and restart the machine's processes) on every pass.
	existing map[string]string
}

func (in renderInput) dir() string { return path.Join(BaseDir, in.cluster, in.machine) }

func (in renderInput) apiPort() int32 {
	if in.spec.APIServerPort != 0 {
		return in.spec.APIServerPort
	}
	return api.DefaultKubernetesAPIPort
}

// controllerPorts are the machine's kube-controller-manager and
// kube-scheduler ports: the upstream defaults shifted by as much as the
// cluster's kube-apiserver port is from its default; where that would pass
// 65535 (a kube-apiserver port above 61719), 3818 and 3816 below it instead.
func (in renderInput) controllerPorts() (kcm, scheduler int32) {
	shift := in.apiPort() - api.DefaultKubernetesAPIPort
	kcm, scheduler = controllerManagerPort+shift, schedulerPort+shift
	if scheduler > 65535 {
		kcm, scheduler = kcm-2*(schedulerPort-api.DefaultKubernetesAPIPort), scheduler-2*(schedulerPort-api.DefaultKubernetesAPIPort)
	}
	return kcm, scheduler
}

// render makes the machine's plan spec for its stage.
func render(in renderInput) (api.MachinePlanSpec, error) {
	d := in.dir()
	var spec api.MachinePlanSpec
	spec.MaxFailures = 5
	file := func(name, content string, mode int32) {
		spec.Files = append(spec.Files, api.PlanFile{Path: path.Join(d, name), Content: content, Mode: mode})
	}
	ip := net.ParseIP(in.address)
	if ip == nil {
		return spec, fmt.Errorf("machine %s's address %q is not an IP address", in.machine, in.address)
	}
	server := in.stage.etcdMember >= 0 || in.stage.apiServer
	file("pki/"+fileCACert, string(in.pki.ca.CertPEM), 0o644)
	if in.stage.leave {
		// The drain plan of a deleted member's machine: leave etcd
		// through another member, then stop what the machine runs.
		cert, key, err := in.keep("etcd", func() ([]byte, []byte, error) {
			return in.pki.ca.IssuePeer("etcd-"+in.machine, []string{"localhost"}, []net.IP{ip, net.ParseIP("127.0.0.1")}, certValidity)
		}, ip)
		if err != nil {
			return spec, err
		}
		file("pki/etcd.crt", cert, 0o644)
		file("pki/etcd.key", key, 0o600)
		file("etcd-leave.sh", in.etcdLeaveScript(), 0o700)
		spec.Instructions = []api.PlanInstruction{{Name: "etcd-member-remove", Command: "/bin/sh",
			Args: []string{path.Join(d, "etcd-leave.sh")}, TimeoutSeconds: 120, SaveOutput: true}}
		sort.Slice(spec.Files, func(i, j int) bool { return spec.Files[i].Path < spec.Files[j].Path })
		return spec, nil
	}
	if server {
		file("pki/"+fileCAKey, string(in.pki.caKeyPEM), 0o600)
		file("pki/"+fileSigner, string(in.pki.signer.CertPEM), 0o644)
		file("pki/"+fileSignKey, string(in.pki.signerKeyPEM), 0o600)
		file("pki/"+fileClientCA, string(in.pki.ca.CertPEM)+string(in.pki.signer.CertPEM), 0o644)
		file("pki/"+fileSAKey, string(in.pki.saKeyPEM), 0o600)
		file("pki/"+fileSAPub, string(in.pki.saPubPEM), 0o644)
		file("pki/"+fileToken, in.pki.tokenID+"."+in.pki.tokenSecret+"\n", 0o600)
	}
	file("run.sh", runScript, 0o700)
	if err := in.fetchBinaries(&spec, file); err != nil {
		return spec, err
	}
	loopback := []net.IP{ip, net.ParseIP("127.0.0.1")}
	if in.stage.etcdMember >= 0 {
		cert, key, err := in.keep("etcd", func() ([]byte, []byte, error) {
			return in.pki.ca.IssuePeer("etcd-"+in.machine, []string{"localhost"}, loopback, certValidity)
		}, ip)
		if err != nil {
			return spec, err
		}
		file("pki/etcd.crt", cert, 0o644)
		file("pki/etcd.key", key, 0o600)
		file("etcd.cmd", in.keepStarted("etcd.cmd", in.etcdCommand()), 0o600)
		if in.stage.etcdMember > 0 {
			file("etcd-join.sh", in.keepStarted("etcd-join.sh", in.etcdJoinScript()), 0o700)
			spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "etcd-member-add", Command: "/bin/sh",
				Args: []string{path.Join(d, "etcd-join.sh")}, TimeoutSeconds: 150, SaveOutput: true})
		}
		spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "etcd", Command: "/bin/sh",
			Args: []string{path.Join(d, "run.sh"), "etcd"}, TimeoutSeconds: 60})
		spec.Probes = append(spec.Probes, api.PlanProbe{Name: "etcd", PeriodSeconds: 1, FailureThreshold: 3,
			HTTPGet: &api.HTTPGetProbe{URL: fmt.Sprintf("http://127.0.0.1:%d/health", etcdMetricsPort)}})
	}
	if in.stage.remove != "" && in.stage.etcdMember >= 0 {
		// A deleted member whose agent is gone cannot leave by itself:
		// this member removes it, after its own etcd runs.
		if net.ParseIP(in.removeAddress) == nil {
			return spec, fmt.Errorf("machine %s's address %q (a member to remove from etcd) is not an IP address", in.stage.remove, in.removeAddress)
		}
		file("etcd-remove.sh", in.etcdRemoveScript(), 0o700)
		spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "etcd-member-remove", Command: "/bin/sh",
			Args: []string{path.Join(d, "etcd-remove.sh")}, TimeoutSeconds: 120, SaveOutput: true})
	}
	if in.stage.apiServer {
		_, svc, err := net.ParseCIDR(in.serviceCIDR())
		if err != nil {
			return spec, err
		}
		first := make(net.IP, len(svc.IP.To4()))
		copy(first, svc.IP.To4())
		first[len(first)-1]++
		cert, key, err := in.keep("apiserver", func() ([]byte, []byte, error) {
			return in.pki.ca.IssueServing("kube-apiserver",
				[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
				append(loopback, first), certValidity)
		}, ip)
		if err != nil {
			return spec, err
		}
		file("pki/apiserver.crt", cert, 0o644)
		file("pki/apiserver.key", key, 0o600)
		for _, c := range []struct{ name, cn string }{{"apiserver-etcd-client", "kube-apiserver-etcd-client"}, {"admin", "muster-planner-admin"}} {
			cert, key, err := in.keep(c.name, func() ([]byte, []byte, error) {
				groups := []string(nil)
				if c.name == "admin" {
					groups = []string{"system:masters"}
				}
				return in.pki.ca.IssueClient(c.cn, groups, certValidity)
			}, nil)
			if err != nil {
				return spec, err
			}
			file("pki/"+c.name+".crt", cert, 0o644)
			file("pki/"+c.name+".key", key, 0o600)
		}
		file("admin.kubeconfig", kubeconfig(fmt.Sprintf("https://127.0.0.1:%d", in.apiPort()), path.Join(d, "pki", fileCACert),
			"client-certificate: "+path.Join(d, "pki/admin.crt")+"\n    client-key: "+path.Join(d, "pki/admin.key")), 0o600)
		file("bootstrap.yaml", in.bootstrapManifest(), 0o600)
		file("kube-apiserver.cmd", in.apiServerCommand(), 0o600)
		spec.Instructions = append(spec.Instructions,
			api.PlanInstruction{Name: "kube-apiserver-version", Command: "/bin/sh", Args: []string{"-c", in.versionCheck("kube-apiserver")}, TimeoutSeconds: 30, SaveOutput: true},
			api.PlanInstruction{Name: "kube-apiserver", Command: "/bin/sh", Args: []string{path.Join(d, "run.sh"), "kube-apiserver"}, TimeoutSeconds: 60},
			// The version gate: the process started serves the version
			// asked for, or the plan fails at once (a kube-apiserver that
			// exits fails it here, not after the bootstrap's retries).
			api.PlanInstruction{Name: "kube-apiserver-serves-version", Command: "/bin/sh", Args: []string{"-c", in.servesVersion()}, TimeoutSeconds: 150, SaveOutput: true},
			// Applied on every control-plane machine: apply is idempotent,
			// and the first one up makes the cluster's bootstrap objects.
			api.PlanInstruction{Name: "bootstrap-objects", Command: "/bin/sh", Args: []string{"-c", retry(120,
				fmt.Sprintf("%s --kubeconfig %s apply -f %s", in.bin.path("kubectl"), path.Join(d, "admin.kubeconfig"), path.Join(d, "bootstrap.yaml")))},
				TimeoutSeconds: 180})
		// Workers drained before their plan is rewritten at another
		// version, and uncordoned once healthy at it, through this
		// machine's own kube-apiserver. The scripts end with success
		// either way and say on their last line whether they did it: a
		// drain that fails holds the upgrade, it must not fail this
		// control-plane machine's plan (which would revert the cluster).
		for _, w := range in.drain {
			spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "drain-" + w, Command: "/bin/sh",
				Args: []string{"-c", in.drainScript(w)}, TimeoutSeconds: in.drainTimeout + 60, SaveOutput: true})
		}
		for _, w := range in.uncordon {
			spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "uncordon-" + w, Command: "/bin/sh",
				Args: []string{"-c", in.uncordonScript(w)}, TimeoutSeconds: 90, SaveOutput: true})
		}
		spec.Probes = append(spec.Probes, api.PlanProbe{Name: api.KubeAPIServerProbe, PeriodSeconds: 1, FailureThreshold: 3,
			// On the machine's loopback, which its serving certificate
			// names; /readyz is open to anyone (system:public-info-viewer).
			HTTPGet: &api.HTTPGetProbe{URL: fmt.Sprintf("https://127.0.0.1:%d/readyz", in.apiPort()), InsecureSkipVerify: true}})
	}
	if in.stage.controllers {
		kcmPort, schedPort := in.controllerPorts()
		local := fmt.Sprintf("https://127.0.0.1:%d", in.apiPort())
		for _, c := range []struct{ name, cn string }{{"controller-manager", "system:kube-controller-manager"}, {"scheduler", "system:kube-scheduler"}} {
			// Their users, which Kubernetes' default RBAC binds to their
			// roles (system:kube-controller-manager, system:kube-scheduler).
			cert, key, err := in.keep(c.name, func() ([]byte, []byte, error) { return in.pki.ca.IssueClient(c.cn, nil, certValidity) }, nil)
			if err != nil {
				return spec, err
			}
			file("pki/"+c.name+".crt", cert, 0o644)
			file("pki/"+c.name+".key", key, 0o600)
			file(c.name+".kubeconfig", kubeconfig(local, path.Join(d, "pki", fileCACert),
				"client-certificate: "+path.Join(d, "pki/"+c.name+".crt")+"\n    client-key: "+path.Join(d, "pki/"+c.name+".key")), 0o600)
		}
		file("kube-controller-manager.cmd", in.controllerManagerCommand(kcmPort), 0o600)
		file("kube-scheduler.cmd", in.schedulerCommand(schedPort), 0o600)
		spec.Instructions = append(spec.Instructions,
			api.PlanInstruction{Name: "kube-controller-manager-version", Command: "/bin/sh", Args: []string{"-c", in.versionCheck("kube-controller-manager")}, TimeoutSeconds: 30, SaveOutput: true},
			api.PlanInstruction{Name: "kube-scheduler-version", Command: "/bin/sh", Args: []string{"-c", in.versionCheck("kube-scheduler")}, TimeoutSeconds: 30, SaveOutput: true},
			api.PlanInstruction{Name: "kube-controller-manager", Command: "/bin/sh", Args: []string{path.Join(d, "run.sh"), "kube-controller-manager"}, TimeoutSeconds: 60},
			api.PlanInstruction{Name: "kube-scheduler", Command: "/bin/sh", Args: []string{path.Join(d, "run.sh"), "kube-scheduler"}, TimeoutSeconds: 60})
		// Their serving certificates are the self-signed ones they make
		// in memory, which only these loopback probes see: /healthz is
		// open to anyone (their --authorization-always-allow-paths).
		spec.Probes = append(spec.Probes,
			api.PlanProbe{Name: "kube-controller-manager", PeriodSeconds: 2, FailureThreshold: 3,
				HTTPGet: &api.HTTPGetProbe{URL: fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), InsecureSkipVerify: true}},
			api.PlanProbe{Name: "kube-scheduler", PeriodSeconds: 2, FailureThreshold: 3,
				HTTPGet: &api.HTTPGetProbe{URL: fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), InsecureSkipVerify: true}})
	}
	if in.stage.worker {
		file("bootstrap.kubeconfig", kubeconfig("https://"+net.JoinHostPort(in.apiServer, fmt.Sprint(in.apiPort())), path.Join(d, "pki", fileCACert),
			"token: "+in.pki.tokenID+"."+in.pki.tokenSecret), 0o600)
		// The kubelet's own credential: the certificate its CSR is
		// issued (kubelet.crt) and the key the script makes (kubelet.key,
		// 0600), both written on the machine, never in the plan.
		file("kubelet.kubeconfig", kubeconfig("https://"+net.JoinHostPort(in.apiServer, fmt.Sprint(in.apiPort())), path.Join(d, "pki", fileCACert),
			"client-certificate: "+path.Join(d, "kubelet.crt")+"\n    client-key: "+path.Join(d, "kubelet.key")), 0o600)
		file("kubelet-bootstrap.sh", in.kubeletBootstrapScript(), 0o700)
		spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "kubelet-bootstrap", Command: "/bin/sh",
			Args: []string{path.Join(d, "kubelet-bootstrap.sh")}, TimeoutSeconds: 180, SaveOutput: true})
		// Healthy once the cluster has the worker's Node, read with the
		// worker's own credential.
		spec.Probes = append(spec.Probes, api.PlanProbe{Name: "node", PeriodSeconds: 3, TimeoutSeconds: 10, FailureThreshold: 3,
			Exec: &api.ExecProbe{Command: in.bin.path("kubectl"), Args: []string{"--kubeconfig", path.Join(d, "kubelet.kubeconfig"), "get", "node", in.machine, "-o", "name"}}})
	}
	sort.Slice(spec.Files, func(i, j int) bool { return spec.Files[i].Path < spec.Files[j].Path })
	return spec, nil
}

// drainedLine and uncordonedLine are the last line of a drain or uncordon
// instruction's output when it did it.
func drainedLine(w string) string    { return "drained " + w }
func uncordonedLine(w string) string { return "uncordoned " + w }

// drainScript cordons worker w and evicts its pods (DaemonSets' stay,
// emptyDir data goes, pods without a controller go too), waiting for each
// pod's grace period but no longer (--skip-wait-for-delete-timeout): no
// kubelet runs on a Muster worker to confirm a pod is gone.
func (in renderInput) drainScript(w string) string {
	return fmt.Sprintf(`out=$(%s --kubeconfig %s drain %s --ignore-daemonsets --delete-emptydir-data --force --skip-wait-for-delete-timeout=1 --timeout=%ds 2>&1) && { echo "%s"; exit 0; }
echo "$out" | tail -n 5
echo "kubectl drain %s failed (above)"
`, in.bin.path("kubectl"), path.Join(in.dir(), "admin.kubeconfig"), w, in.drainTimeout, drainedLine(w), w)
}

// uncordonScript makes worker w schedulable again.
func (in renderInput) uncordonScript(w string) string {
	return fmt.Sprintf(`for i in $(seq 30); do
  out=$(%s --kubeconfig %s uncordon %s 2>&1) && { echo "%s"; exit 0; }
  sleep 2
done
echo "$out" | tail -n 5
echo "kubectl uncordon %s failed (above)"
`, in.bin.path("kubectl"), path.Join(in.dir(), "admin.kubeconfig"), w, uncordonedLine(w), w)
}

func (in renderInput) serviceCIDR() string {
	if in.spec.ServiceCIDR != "" {
		return in.spec.ServiceCIDR
	}
	return api.DefaultServiceCIDR
}

// keep returns the machine's existing certificate NAME.crt and key if the
// cluster's CA signed it, it has a month left, and (for a serving one) it
// names ip; else a new one from issue.
func (in renderInput) keep(name string, issue func() ([]byte, []byte, error), ip net.IP) (string, string, error) {
	certPEM, keyPEM := in.existing[name+".crt"], in.existing[name+".key"]
	if certPEM != "" && keyPEM != "" {
		if certs, err := pki.ParseCertsPEM([]byte(certPEM)); err == nil {
			c := certs[0]
			_, verr := c.Verify(x509.VerifyOptions{Roots: in.pki.ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			names := ip == nil
			for _, a := range c.IPAddresses {
				names = names || a.Equal(ip)
			}
			if verr == nil && names && time.Until(c.NotAfter) > 30*24*time.Hour {
				return certPEM, keyPEM, nil
			}
		}
	}
	c, k, err := issue()
	return string(c), string(k), err
}

// initialCluster is the part of an etcd command that only its first
// start reads: with a data dir, etcd takes its members from it.
var initialCluster = regexp.MustCompile(`--initial-cluster \S+ --initial-cluster-state \S+`)

// keepStarted returns the machine's existing etcd.cmd or etcd-join.sh in
// place of fresh when they differ only in what matters before the
// member's first start: the members before it, which change when an
// earlier member leaves. Rewriting them would restart its etcd (run.sh
// restarts a changed command) and apply its plan again, for nothing.
func (in renderInput) keepStarted(name, fresh string) string {
	old := in.existing[name]
	switch {
	case old == "":
		return fresh
	case name == "etcd.cmd" && initialCluster.ReplaceAllString(old, "") == initialCluster.ReplaceAllString(fresh, ""):
		return old
	case name == "etcd-join.sh" && strings.Contains(old, joinedMarker):
		return old
	}
	return fresh
}

// joinedMarker is in a join script that does nothing once its member's
// etcd has a data dir (so the members it asks no longer matter).
const joinedMarker = "a member (its etcd data dir exists)"

func (in renderInput) etcdCommand() string {
	d, a := in.dir(), in.address
	var initial []string
	for _, m := range in.members {
		initial = append(initial, fmt.Sprintf("%s=https://%s", m.name, net.JoinHostPort(m.address, fmt.Sprint(etcdPeerPort))))
	}
	state := "new"
	if in.stage.etcdMember > 0 {
		state = "existing"
	}
	p := path.Join(d, "pki")
	return fmt.Sprintf(`exec %s --name %s --data-dir %s \
  --listen-client-urls https://%s:%d,https://127.0.0.1:%d --advertise-client-urls https://%s:%d \
  --listen-peer-urls https://%s:%d --initial-advertise-peer-urls https://%s:%d \
  --listen-metrics-urls http://127.0.0.1:%d \
  --initial-cluster %s --initial-cluster-state %s --initial-cluster-token %s \
  --cert-file %s/etcd.crt --key-file %s/etcd.key --trusted-ca-file %s/ca.crt --client-cert-auth \
  --peer-cert-file %s/etcd.crt --peer-key-file %s/etcd.key --peer-trusted-ca-file %s/ca.crt --peer-client-cert-auth
`, in.bin.path("etcd"), in.machine, path.Join(d, "etcd-data"),
		a, etcdClientPort, etcdClientPort, a, etcdClientPort,
		a, etcdPeerPort, a, etcdPeerPort, etcdMetricsPort,
		strings.Join(initial, ","), state, in.cluster, p, p, p, p, p, p)
}

// etcdJoinScript adds the machine to etcd's member list through a member
// already there (the etcd v3 API's JSON gateway), before its etcd starts:
// etcd refuses a member it was not told of. It does nothing if the member
// is listed already (a plan run again).
func (in renderInput) etcdJoinScript() string {
	p := path.Join(in.dir(), "pki")
	peer := fmt.Sprintf("https://%s", net.JoinHostPort(in.address, fmt.Sprint(etcdPeerPort)))
	var others []string
	for _, m := range in.members {
		if m.name != in.machine {
			others = append(others, net.JoinHostPort(m.address, fmt.Sprint(etcdClientPort)))
		}
	}
	return fmt.Sprintf(`#!/bin/sh
# Adds this machine (%[1]s, peer URL %[2]s) to etcd's members, through the first member that answers.
# etcd refuses a member add until every member has been connected for a
# few seconds (its strict reconfiguration check), so the add is retried.
set -u
# Its etcd has started before (its data dir holds a member): it was
# added then. A plan applied again (when the member removes a dead one)
# must not wait on members that may be dead, as the first ones it lists.
if [ -d %[5]s/member ]; then echo "%[6]s"; exit 0; fi
c="curl -sS --fail --max-time 10 --cacert %[4]s/ca.crt --cert %[4]s/etcd.crt --key %[4]s/etcd.key"
added=""
for i in $(seq 90); do
  for ep in %[3]s; do
    list=$($c -X POST https://$ep/v3/cluster/member/list -d '{}') || continue
    case "$list" in *'"%[2]s"'*) echo "a member (through $ep)"; added=1; break;; esac
    $c -X POST https://$ep/v3/cluster/member/add -d '{"peerURLs":["%[2]s"]}' >/dev/null && { echo "added through $ep"; added=1; break; }
  done
  [ -n "$added" ] && break
  sleep 1
done
if [ -z "$added" ]; then
  echo "no etcd member (%[3]s) added %[1]s in 90 s: is the cluster's etcd healthy? see the members' MachinePlans" >&2
  exit 1
fi
# A new member asks its peers for the member list when it starts and
# stops if one of them does not list it yet: wait until every one does.
for i in $(seq 30); do
  all=1
  for ep in %[3]s; do
    case "$($c -X POST https://$ep/v3/cluster/member/list -d '{}' 2>/dev/null)" in *'"%[2]s"'*) ;; *) all="";; esac
  done
  [ -n "$all" ] && exit 0
  sleep 1
done
echo "added, but not every member lists %[1]s after 30 s" >&2
exit 1
`, in.machine, peer, strings.Join(others, " "), p, path.Join(in.dir(), "etcd-data"), joinedMarker)
}

// etcdLeaveScript removes the machine from etcd's members through another
// member (found by its peer URL), then stops what the machine runs.
func (in renderInput) etcdLeaveScript() string {
	p := path.Join(in.dir(), "pki")
	peer := fmt.Sprintf("https://%s", net.JoinHostPort(in.address, fmt.Sprint(etcdPeerPort)))
	var others []string
	for _, m := range in.allMembers {
		if m.name != in.machine {
			others = append(others, net.JoinHostPort(m.address, fmt.Sprint(etcdClientPort)))
		}
	}
	return fmt.Sprintf(`#!/bin/sh
# Removes this machine (%[1]s, peer URL %[2]s) from etcd's members, then stops it.
set -u
d=%[5]s
c="curl -sS --fail --max-time 10 --cacert %[4]s/ca.crt --cert %[4]s/etcd.crt --key %[4]s/etcd.key"
gone=""
for i in $(seq 60); do
  for ep in %[3]s; do
    list=$($c -X POST https://$ep/v3/cluster/member/list -d '{}') || continue
    id=$(printf '%%s' "$list" | tr '{' '\n' | grep -F '"%[2]s"' | sed -n 's/.*"ID":"*\([0-9][0-9]*\).*/\1/p' | head -n 1)
    if [ -z "$id" ]; then echo "not a member (through $ep)"; gone=1; break; fi
    if $c -X POST https://$ep/v3/cluster/member/remove -d "{\"ID\":\"$id\"}" >/dev/null; then echo "removed member $id through $ep"; gone=1; break; fi
  done
  [ -n "$gone" ] && break
  sleep 1
done
if [ -z "$gone" ]; then echo "no etcd member (%[3]s) removed %[1]s in 60 s: is the cluster's etcd healthy?" >&2; exit 1; fi
for n in kube-scheduler kube-controller-manager kube-apiserver etcd; do
  [ -f $d/$n.pid ] && kill "$(cat $d/$n.pid)" 2>/dev/null || true
done
exit 0
`, in.machine, peer, strings.Join(others, " "), p, in.dir())
}

// etcdRemoveScript removes a dead machine's member (found by its peer
// URL) through this machine's own member, which is healthy: the dead
// machine's agent cannot run its own drain plan. It does nothing if the
// member is not listed (a plan run again).
func (in renderInput) etcdRemoveScript() string {
	p := path.Join(in.dir(), "pki")
	peer := fmt.Sprintf("https://%s", net.JoinHostPort(in.removeAddress, fmt.Sprint(etcdPeerPort)))
	ep := net.JoinHostPort(in.address, fmt.Sprint(etcdClientPort))
	return fmt.Sprintf(`#!/bin/sh
# Removes the member of %[1]s (peer URL %[2]s), whose machine was deleted
# with its agent gone, through this machine's member at %[3]s.
set -u
c="curl -sS --fail --max-time 10 --cacert %[4]s/ca.crt --cert %[4]s/etcd.crt --key %[4]s/etcd.key"
for i in $(seq 60); do
  if list=$($c -X POST https://%[3]s/v3/cluster/member/list -d '{}'); then
    id=$(printf '%%s' "$list" | tr '{' '\n' | grep -F '"%[2]s"' | sed -n 's/.*"ID":"*\([0-9][0-9]*\).*/\1/p' | head -n 1)
    if [ -z "$id" ]; then echo "%[1]s is not a member"; exit 0; fi
    if $c -X POST https://%[3]s/v3/cluster/member/remove -d "{\"ID\":\"$id\"}" >/dev/null; then echo "removed %[1]s's member $id"; exit 0; fi
  fi
  sleep 1
done
echo "this machine's etcd member (%[3]s) did not remove %[1]s's member in 60 s: is it healthy? see its MachinePlan's status" >&2
exit 1
`, in.stage.remove, peer, ep, p)
}

func (in renderInput) apiServerCommand() string {
	d := in.dir()
	p := path.Join(d, "pki")
	// A control-plane machine that is an etcd member talks to its own
	// member only (kubeadm's stacked etcd): its command, and so its
	// process, stays the same when members join. One that is not talks
	// to every member, and is restarted when they change.
	var etcd []string
	if in.stage.etcdMember >= 0 {
		etcd = []string{fmt.Sprintf("https://127.0.0.1:%d", etcdClientPort)}
	} else {
		for _, m := range in.allMembers {
			etcd = append(etcd, "https://"+net.JoinHostPort(m.address, fmt.Sprint(etcdClientPort)))
		}
	}
	return fmt.Sprintf(`exec %s --etcd-servers=%s \
  --etcd-cafile=%s/ca.crt --etcd-certfile=%s/apiserver-etcd-client.crt --etcd-keyfile=%s/apiserver-etcd-client.key \
  --bind-address=0.0.0.0 --secure-port=%d --advertise-address=%s \
  --tls-cert-file=%s/apiserver.crt --tls-private-key-file=%s/apiserver.key --client-ca-file=%s/client-ca.crt \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file=%s/sa.pub --service-account-signing-key-file=%s/sa.key \
  --service-cluster-ip-range=%s --authorization-mode=Node,RBAC --enable-bootstrap-token-auth \
  --enable-admission-plugins=NodeRestriction \
  --cert-dir=%s
`, in.bin.path("kube-apiserver"), strings.Join(etcd, ","), p, p, p, in.apiPort(), in.address, p, p, p, p, p,
		in.serviceCIDR(), path.Join(d, "apiserver-certs"))
}

// controllerManagerCommand runs kube-controller-manager against the
// machine's own kube-apiserver, leader-elected among the control-plane
// machines: it signs CSRs (the workers' kubelet client certificates,
// which csrapproving approves for the bootstrap token's group) with the
// cluster's CSR signer, which kube-apiserver trusts and etcd does not, makes the service-account tokens' secrets' ca.crt, and
// runs the bootstrap-token signer and cleaner besides the defaults.
func (in renderInput) controllerManagerCommand(port int32) string {
	d := in.dir()
	p := path.Join(d, "pki")
	kc := path.Join(d, "controller-manager.kubeconfig")
	return fmt.Sprintf(`exec %s --kubeconfig=%s --authentication-kubeconfig=%s --authorization-kubeconfig=%s \
  --bind-address=127.0.0.1 --secure-port=%d --leader-elect=true --cluster-name=%s \
  --cluster-signing-cert-file=%s/signer-ca.crt --cluster-signing-key-file=%s/signer-ca.key \
  --service-account-private-key-file=%s/sa.key --root-ca-file=%s/ca.crt --use-service-account-credentials=true \
  --service-cluster-ip-range=%s --controllers=*,bootstrapsigner,tokencleaner
`, in.bin.path("kube-controller-manager"), kc, kc, kc, port, in.cluster, p, p, p, p, in.serviceCIDR())
}

// schedulerCommand runs kube-scheduler against the machine's own
// kube-apiserver, leader-elected among the control-plane machines.
func (in renderInput) schedulerCommand(port int32) string {
	kc := path.Join(in.dir(), "scheduler.kubeconfig")
	return fmt.Sprintf(`exec %s --kubeconfig=%s --authentication-kubeconfig=%s --authorization-kubeconfig=%s \
  --bind-address=127.0.0.1 --secure-port=%d --leader-elect=true
`, in.bin.path("kube-scheduler"), kc, kc, kc, port)
}

// fetchBinaries adds the download of the plan's binaries, before any
// other instruction: each into the version's directory unless it is there
// with its pinned SHA-256, refused (and deleted) when its sum is another.
func (in renderInput) fetchBinaries(spec *api.MachinePlanSpec, file func(name, content string, mode int32)) error {
	if len(in.bin.fetch) == 0 {
		return nil
	}
	have := map[string]api.KubernetesBinary{}
	for _, b := range in.bin.fetch {
		have[b.Name] = b
	}
	var missing, calls []string
	seen := map[string]bool{}
	caFile := path.Join(in.dir(), "pki", "muster-server-ca.crt")
	usesServer := false
	for _, n := range in.stage.needs() {
		b, ok := have[n]
		switch {
		case seen[n]:
			continue
		case !ok:
			missing = append(missing, n)
		default:
			ca := ""
			if in.bin.serverURL != "" && strings.HasPrefix(b.URL, in.bin.serverURL+"/") && len(in.bin.serverCA) > 0 {
				ca, usesServer = caFile, true
			}
			calls = append(calls, strings.TrimSpace(fmt.Sprintf("fetch %s '%s' %s %s", n, b.URL, strings.ToLower(b.Sha256), ca)))
		}
		seen[n] = true
	}
	if len(missing) > 0 {
		return fmt.Errorf("machine %s needs %s of Kubernetes %s, which the binaries pinned for it do not list (spec.kubernetes.binaries, or the server's --kubernetes-assets-dir): add them", in.machine, strings.Join(missing, " and "), in.spec.Version)
	}
	if usesServer {
		file("pki/muster-server-ca.crt", string(in.bin.serverCA), 0o644)
	}
	file("fetch.sh", fmt.Sprintf(fetchScript, in.spec.Version, in.bin.dir, strings.Join(calls, "\n")), 0o700)
	spec.Instructions = append(spec.Instructions, api.PlanInstruction{Name: "fetch-binaries", Command: "/bin/sh",
		Args: []string{path.Join(in.dir(), "fetch.sh")}, TimeoutSeconds: 900, SaveOutput: true})
	return nil
}

// fetchScript downloads a version's binaries (%[1]s) into %[2]s: each is
// downloaded beside its final name, checked against its SHA-256, and only
// then made executable and moved into place; one with another sum is
// deleted and fails the plan, naming the binary, the sum pinned and the
// sum got. One already there with its sum is kept.
const fetchScript = `#!/bin/sh
# Downloads the binaries of Kubernetes %[1]s this plan runs, each checked by its SHA-256 before anything runs it.
set -u
d=%[2]s
mkdir -p "$d"
fetch() { # NAME URL SHA256 [CA]
  f="$d/$1"
  if [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$3" ]; then echo "$1: have it (sha256 $3)"; return 0; fi
  tmp="$d/.$1.$$"
  rm -f "$tmp"
  if ! curl -sS --fail --retry 10 --retry-delay 2 --retry-all-errors --max-time 600 ${4:+--cacert "$4"} -o "$tmp" "$2"; then
    rm -f "$tmp"; echo "$1: downloading $2 failed: is the URL right, and its server reachable from this machine?" >&2; exit 1
  fi
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$3" ]; then
    rm -f "$tmp"
    echo "$1 from $2 refused: its sha256 is $got, expected $3 (pinned by the plan); it was deleted and never run. Check what that URL serves, or pin the right sum" >&2
    exit 1
  fi
  chmod 0755 "$tmp" && mv -f "$tmp" "$f" && echo "$1: downloaded (sha256 $3)"
}
%[3]s
`

// servesVersion waits until the kube-apiserver the plan started serves
// /version with the version asked for; it fails at once if the process
// exited, with the last lines of its log.
func (in renderInput) servesVersion() string {
	d := in.dir()
	return fmt.Sprintf(`d=%[1]s
for i in $(seq 120); do
  kill -0 "$(cat $d/kube-apiserver.pid 2>/dev/null)" 2>/dev/null || { echo "kube-apiserver %[3]s exited; the end of $d/kube-apiserver.log:" >&2; tail -n 5 $d/kube-apiserver.log >&2; exit 1; }
  v=$(curl -sk --max-time 2 https://127.0.0.1:%[2]d/version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')
  [ "$v" = "%[3]s" ] && { echo "kube-apiserver serves $v"; exit 0; }
  sleep 1
done
echo "kube-apiserver did not serve /version %[3]s within 120 s (it said: ${v:-nothing})" >&2
exit 1`, d, in.apiPort(), in.spec.Version)
}

// versionCheck fails the plan, saying what it found, when the machine's
// binary of component (kube-apiserver, kube-controller-manager,
// kube-scheduler) is not the version the cluster asks for, before it runs.
func (in renderInput) versionCheck(component string) string {
	return fmt.Sprintf(`v=$(%[1]s --version 2>&1) || { echo "cannot run %[1]s: $v" >&2; exit 1; }
[ "$v" = "Kubernetes %[2]s" ] || { echo "%[1]s is $v; the cluster asks for %[2]s (spec.kubernetes.version): install that version, or change the version" >&2; exit 1; }
echo "$v"`, in.bin.path(component), in.spec.Version)
}

// bootstrapManifest is what the first control-plane machine up makes in
// the cluster: the workers' bootstrap token and what it may do (create a
// CSR for its kubelet), and Muster's administrators as cluster-admin and
// viewers as view, whom the server impersonates through its proxy.
func (in renderInput) bootstrapManifest() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-%[1]s, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: %[1]s
  token-secret: %[2]s
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: system:bootstrappers:muster:worker
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: muster:kubelet-bootstrap}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-bootstrapper}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: muster:node-autoapprove-bootstrap}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:certificates.k8s.io:certificatesigningrequests:nodeclient}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: muster:admins}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "muster:admins"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: muster:viewers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "muster:viewers"}]
`, in.pki.tokenID, in.pki.tokenSecret)
}

// kubeletBootstrapScript does, with the worker's bootstrap credentials,
// what a kubelet's TLS bootstrap does: it makes a key and asks the cluster
// for a client certificate as system:node:<machine> (a CSR for signer
// kubernetes.io/kube-apiserver-client-kubelet), which
// kube-controller-manager approves (the bootstrap token's group may
// auto-approve node client CSRs) and signs with the cluster's CA; then,
// with that certificate, it registers the machine's Node as a kubelet
// does first (the Node authorizer and NodeRestriction let a node create
// its own Node). No container runtime runs here, so no kubelet does, and
// the Node never turns Ready; this proves the credentials end to end.
func (in renderInput) kubeletBootstrapScript() string {
	d := in.dir()
	return fmt.Sprintf(`#!/bin/sh
set -eu
umask 077
d=%[1]s
kubectl=%[2]s
k="$kubectl --kubeconfig $d/bootstrap.kubeconfig"
csr=node-csr-%[3]s
if ! [ -s $d/kubelet.crt ]; then
  [ -f $d/kubelet.key ] || openssl ecparam -name prime256v1 -genkey -noout -out $d/kubelet.key
  req=$(openssl req -new -key $d/kubelet.key -subj "/O=system:nodes/CN=system:node:%[3]s" | base64 | tr -d '\n')
  made=""
  for i in $(seq 60); do
    if $k get csr $csr >/dev/null 2>&1; then made=1; break; fi
    printf 'apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {name: %%s}\nspec:\n  signerName: kubernetes.io/kube-apiserver-client-kubelet\n  usages: [digital signature, client auth]\n  request: %%s\n' $csr "$req" | $k create -f - && { made=1; break; }
    sleep 1
  done
  if [ -z "$made" ]; then
    echo "the cluster's API at %[4]s did not take this worker's CSR with its bootstrap token for 60 s" >&2
    exit 1
  fi
  echo "CSR $csr is in the cluster"
  for i in $(seq 90); do
    st=$($k get csr $csr -o 'jsonpath={.status.conditions[*].type}' 2>/dev/null || true)
    case "$st" in *Denied*|*Failed*) echo "CSR $csr is $st: delete it (kubectl delete csr $csr) to have this plan ask again" >&2; exit 1;; esac
    c=$($k get csr $csr -o 'jsonpath={.status.certificate}' 2>/dev/null || true)
    if [ -n "$c" ]; then
      printf '%%s' "$c" | base64 -d >$d/kubelet.crt.tmp && mv $d/kubelet.crt.tmp $d/kubelet.crt
      break
    fi
    sleep 1
  done
  if ! [ -s $d/kubelet.crt ]; then
    echo "CSR $csr was not approved and issued in 90 s: kube-controller-manager approves and signs it (see the control-plane machines' kube-controller-manager.log)" >&2
    exit 1
  fi
  echo "CSR $csr approved and issued: kubelet.crt"
fi
kn="$kubectl --kubeconfig $d/kubelet.kubeconfig"
for i in $(seq 60); do
  if $kn get node %[3]s -o name >/dev/null 2>&1; then echo "Node %[3]s is registered"; exit 0; fi
  printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %[3]s\n  labels: {kubernetes.io/hostname: %[3]s, kubernetes.io/os: linux}\n' | $kn create -f - && { echo "registered Node %[3]s"; exit 0; }
  sleep 1
done
echo "the cluster's API at %[4]s did not take Node %[3]s from this worker's kubelet credential (kubelet.kubeconfig) for 60 s" >&2
exit 1
`, d, in.bin.path("kubectl"), in.machine, in.apiServer)
}

func kubeconfig(server, caFile, user string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    %s
contexts:
- name: default
  context: {cluster: cluster, user: user}
current-context: default
`, server, caFile, user)
}

// retry runs cmd until it succeeds, once a second, at most n times.
func retry(n int, cmd string) string {
	return fmt.Sprintf(`for i in $(seq %d); do %s && exit 0; sleep 1; done; exit 1`, n, cmd)
}

// runScript starts NAME.cmd (beside it) in its own session, as a service
// manager would, unless the process it started last from the very same
// command still runs: a plan run again does not restart what is up, and
// a changed command restarts it.
const runScript = `#!/bin/sh
set -eu
d=$(dirname "$0"); n=$1
cmd="$d/$n.cmd"; pidf="$d/$n.pid"; sumf="$d/$n.sum"
sum=$(sha256sum "$cmd" | cut -d' ' -f1)
if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
  if [ "$(cat "$sumf" 2>/dev/null)" = "$sum" ]; then echo "$n runs"; exit 0; fi
  pid=$(cat "$pidf"); kill "$pid" || true
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
fi
setsid /bin/sh "$cmd" >"$d/$n.log" 2>&1 </dev/null &
echo $! >"$pidf"; echo "$sum" >"$sumf"
echo "$n started"
`
