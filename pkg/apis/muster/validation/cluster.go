package validation

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ValidateCluster checks a Cluster's spec.
func ValidateCluster(c *api.Cluster) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateMaxLen(c.Spec.DisplayName, 256, spec.Child("displayName"))
	if c.Spec.ClientID != "" {
		errs = append(errs, validateIdentifier(c.Spec.ClientID, spec.Child("clientID"))...)
	}
	errs = append(errs, validateKubernetesAPI(c.Spec.KubernetesAPI, spec.Child("kubernetesAPI"))...)
	return append(errs, validateKubernetes(c.Spec.Kubernetes, spec.Child("kubernetes"))...)
}

// kubernetesVersion is a release version as Kubernetes tags it.
var kubernetesVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// validateKubernetes checks the Kubernetes a cluster asks the planner for:
// a distribution the planner has, a version as Kubernetes names one, and
// a port and Service range it can give kube-apiserver.
func validateKubernetes(k *api.ClusterKubernetes, fld *field.Path) field.ErrorList {
	if k == nil {
		return nil
	}
	var errs field.ErrorList
	switch k.Distribution {
	case api.KubernetesDistributionUpstream:
	case "":
		errs = append(errs, field.Required(fld.Child("distribution"), `say which Kubernetes to run: "kubernetes" (upstream etcd and kube-apiserver)`))
	case "k3s", "rke2":
		// Asked for by Rancher's users; refused with the reason rather
		// than a bare list.
		errs = append(errs, field.Invalid(fld.Child("distribution"), k.Distribution,
			`the k3s and RKE2 profiles are not shipped: they were never run end to end (docs/clusters.md); use "kubernetes" (upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler)`))
	default:
		errs = append(errs, field.NotSupported(fld.Child("distribution"), k.Distribution, []string{api.KubernetesDistributionUpstream}))
	}
	switch {
	case k.Version == "":
		errs = append(errs, field.Required(fld.Child("version"), `the Kubernetes version to run, e.g. "v1.37.2"`))
	case len(k.Version) > 64 || !kubernetesVersion.MatchString(k.Version):
		errs = append(errs, field.Invalid(fld.Child("version"), k.Version, `a Kubernetes release version is "v" and three numbers, e.g. "v1.37.2"`))
	}
	if k.APIServerPort < 0 || k.APIServerPort > 65535 {
		errs = append(errs, field.Invalid(fld.Child("apiServerPort"), k.APIServerPort, "a TCP port is 1 to 65535 (0 or unset: 6443)"))
	}
	if k.ServiceCIDR != "" {
		if p, err := netip.ParsePrefix(k.ServiceCIDR); err != nil || p.Masked() != p {
			errs = append(errs, field.Invalid(fld.Child("serviceCIDR"), k.ServiceCIDR, "give the Service range as a CIDR without host bits, e.g. "+api.DefaultServiceCIDR))
		}
	}
	errs = append(errs, validateKubernetesBinaries(k.Binaries, fld.Child("binaries"))...)
	if u := k.UpgradeStrategy; u != nil {
		us := fld.Child("upgradeStrategy")
		for _, c := range []struct {
			name string
			v    int32
			max  int32
		}{{"controlPlaneConcurrency", u.ControlPlaneConcurrency, 64}, {"workerConcurrency", u.WorkerConcurrency, 10000}, {"healthTimeoutSeconds", u.HealthTimeoutSeconds, 86400}} {
			if c.v < 0 || c.v > c.max {
				errs = append(errs, field.Invalid(us.Child(c.name), c.v, fmt.Sprintf("must be 1 to %d (0 or unset: the default)", c.max)))
			}
		}
		if u.HealthTimeoutSeconds != 0 && u.HealthTimeoutSeconds < 10 {
			errs = append(errs, field.Invalid(us.Child("healthTimeoutSeconds"), u.HealthTimeoutSeconds, "a kube-apiserver takes seconds to start: give at least 10 (0 or unset: 300)"))
		}
		if dw := u.DrainWorkers; dw != nil && dw.TimeoutSeconds != 0 && (dw.TimeoutSeconds < 10 || dw.TimeoutSeconds > 3600) {
			errs = append(errs, field.Invalid(us.Child("drainWorkers", "timeoutSeconds"), dw.TimeoutSeconds,
				"a drain waits for pods' grace periods: give 10 to 3600 seconds (0 or unset: 120), or enabled: false to upgrade workers without draining"))
		}
	}
	return errs
}

// maxKubernetesBinaries bounds spec.kubernetes.binaries: one of each name.
var maxKubernetesBinaries = len(api.KubernetesBinaryNames)

// validateKubernetesBinaries checks the binaries a cluster pins: each
// once, of a name the planner runs, from an https URL, with a SHA-256.
func validateKubernetesBinaries(bins []api.KubernetesBinary, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(bins) > maxKubernetesBinaries {
		return field.ErrorList{field.TooMany(fld, len(bins), maxKubernetesBinaries)}
	}
	seen := map[string]bool{}
	for i, b := range bins {
		p := fld.Index(i)
		switch {
		case !slices.Contains(api.KubernetesBinaryNames, b.Name):
			errs = append(errs, field.NotSupported(p.Child("name"), b.Name, api.KubernetesBinaryNames))
		case seen[b.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), b.Name))
		}
		seen[b.Name] = true
		if u, err := url.Parse(b.URL); len(b.URL) > 2048 || err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
			errs = append(errs, field.Invalid(p.Child("url"), truncate(b.URL), "must be an https URL (at most 2048 characters, no user or password in it): a plan downloads the binary from it, verified by the server's CA when it is the server's own address, else by the machine's system roots"))
		} else if strings.ContainsAny(b.URL, "'\"`$\\ \n") {
			errs = append(errs, field.Invalid(p.Child("url"), truncate(b.URL), "must not hold quotes, '$', '`', backslashes or spaces: percent-encode them"))
		}
		errs = append(errs, validateSHA256(b.Sha256, p.Child("sha256"))...)
	}
	return errs
}

func truncate(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// ValidateClusterUpdate refuses a change of a Cluster's clientID once set.
func ValidateClusterUpdate(c, old *api.Cluster) field.ErrorList {
	if old.Spec.ClientID == "" {
		return nil
	}
	return validateImmutable(c.Spec.ClientID, old.Spec.ClientID, field.NewPath("spec", "clientID"))
}

// ValidateClusterStatusUpdate bounds a Cluster's status. The server alone
// writes it; the bounds keep a bug or an administrator's edit from storing
// what no one can read.
func ValidateClusterStatusUpdate(c, old *api.Cluster) field.ErrorList {
	status := field.NewPath("status")
	errs := validateMaxLen(c.Status.Reason, maxReasonBytes, status.Child("reason"))
	errs = append(errs, validateMaxLen(c.Status.Message, maxMessageBytes, status.Child("message"))...)
	// Deleting is final: a cluster that was not deleted would stay
	// there for good, refusing every join.
	if c.Status.Phase == api.ClusterPhaseDeleting && old.Status.Phase != api.ClusterPhaseDeleting && c.DeletionTimestamp == nil && old.DeletionTimestamp == nil {
		errs = append(errs, field.Forbidden(status.Child("phase"), "a cluster is Deleting only once it was deleted, and never leaves it: delete it with 'kubectl delete cluster "+c.Name+"' instead"))
	}
	errs = append(errs, validateKubernetesStatus(c.Status.Kubernetes, old.Status.Kubernetes, status.Child("kubernetes"))...)
	return append(errs, validateConditions(c.Status.Conditions, old.Status.Conditions, status.Child("conditions"))...)
}

// validateKubernetesStatus holds the planner's phase to its state machine
// (internal/fsm KubernetesPlan) and bounds what it says.
func validateKubernetesStatus(k, old *api.ClusterKubernetesStatus, fld *field.Path) field.ErrorList {
	if k == nil {
		return nil
	}
	errs := validateMaxLen(k.Message, maxMessageBytes, fld.Child("message"))
	errs = append(errs, validateMaxLen(k.WaitingFor, 253, fld.Child("waitingFor"))...)
	if len(k.EtcdMembers) > 64 {
		errs = append(errs, field.TooMany(fld.Child("etcdMembers"), len(k.EtcdMembers), 64))
	}
	errs = append(errs, validateMaxLen(k.Version, 64, fld.Child("version"))...)
	errs = append(errs, validateMaxLen(k.FailedVersion, 64, fld.Child("failedVersion"))...)
	errs = append(errs, validateKubernetesBinaries(k.Binaries, fld.Child("binaries"))...)
	from := fsm.KubernetesPlan.Initial()
	if old != nil && old.Phase != "" {
		from = old.Phase
	}
	if k.Phase != "" {
		if _, err := fsm.KubernetesPlan.EventFor(from, k.Phase); err != nil {
			errs = append(errs, field.Invalid(fld.Child("phase"), k.Phase, err.Error()))
		}
	}
	return errs
}

// maxPEMBytes bounds each PEM value of spec.kubernetesAPI: a CA bundle of
// a few dozen certificates, far more than any cluster has.
const maxPEMBytes = 64 << 10

// validateKubernetesAPI checks what the server needs to reach a cluster's
// kube-apiserver: a port, a CA bundle that parses, and one credential
// that does (a certificate with its key, or a token). A value read
// redacted and written back is refused, as in a plan.
func validateKubernetesAPI(k *api.ClusterKubernetesAPI, fld *field.Path) field.ErrorList {
	if k == nil {
		return nil
	}
	var errs field.ErrorList
	if k.Port < 0 || k.Port > 65535 {
		errs = append(errs, field.Invalid(fld.Child("port"), k.Port, "a TCP port is 1 to 65535 (0 or unset: 6443)"))
	}
	errs = append(errs, validateMaxLen(k.ServerName, 253, fld.Child("serverName"))...)
	ca := fld.Child("caCertificate")
	switch {
	case k.CACertificate == "":
		errs = append(errs, field.Required(ca, "the PEM CA bundle that signs the kube-apiserver's serving certificate: the server trusts nothing else for it"))
	case len(k.CACertificate) > maxPEMBytes:
		errs = append(errs, field.TooLong(ca, "", maxPEMBytes))
	case !x509.NewCertPool().AppendCertsFromPEM([]byte(k.CACertificate)):
		errs = append(errs, field.Invalid(ca, "", "holds no PEM certificate (BEGIN CERTIFICATE): give the kube-apiserver's CA, e.g. the content of its ca.crt"))
	}
	cred := fld.Child("credential")
	const redactedWhy = `is what a caller who may not read the cluster's credential reads in its place (` + api.Redacted + `): write the real value`
	c := k.Credential
	for _, v := range []struct {
		value string
		path  *field.Path
	}{{c.ClientKey, cred.Child("clientKey")}, {c.Token, cred.Child("token")}} {
		if v.value == api.Redacted {
			errs = append(errs, field.Invalid(v.path, api.Redacted, redactedWhy))
		}
		if len(v.value) > maxPEMBytes {
			errs = append(errs, field.TooLong(v.path, "", maxPEMBytes))
		}
	}
	hasCert := c.ClientCertificate != "" || c.ClientKey != ""
	switch {
	case hasCert && c.Token != "":
		errs = append(errs, field.Invalid(cred, "", "give a client certificate and key, or a token, not both"))
	case !hasCert && c.Token == "":
		errs = append(errs, field.Required(cred, "a client certificate and key (clientCertificate, clientKey) or a token allowed to impersonate users and groups on the cluster's kube-apiserver"))
	case hasCert && len(errs) == 0:
		// Only the verdict: the parser's words could quote the key.
		if _, err := tls.X509KeyPair([]byte(c.ClientCertificate), []byte(c.ClientKey)); err != nil {
			errs = append(errs, field.Invalid(cred.Child("clientCertificate"), "", "clientCertificate and clientKey are not a PEM certificate and its private key"))
		}
	}
	return errs
}
