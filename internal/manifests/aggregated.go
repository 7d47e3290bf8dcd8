// Package manifests prints the Kubernetes objects that put Muster behind a
// kube-apiserver as an aggregated API server, for `kubectl apply`.
package manifests

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"strings"
	"text/template"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Aggregated says where Muster serves and what its CA is.
type Aggregated struct {
	// Namespace and Service name the Service the APIService points at; the
	// serving certificate must carry <Service>.<Namespace>.svc (--tls-san).
	Namespace, Service string
	// Address and Port are where Muster listens, as the kube-apiserver
	// reaches it: an address that is not loopback (Kubernetes refuses
	// loopback endpoints), with --enable-aggregator-routing on the
	// kube-apiserver, which dials endpoints directly.
	Address string
	Port    int
	// CA is Muster's CA certificate (PEM), which signs its serving certificate.
	CA []byte
	// User is the user the kubeconfigs of --authentication-kubeconfig and
	// --authorization-kubeconfig name: it is bound to system:auth-delegator
	// and to extension-apiserver-authentication-reader.
	User string
}

// ServiceDNSName is the name the aggregator checks Muster's serving certificate for.
func (a Aggregated) ServiceDNSName() string { return a.Service + "." + a.Namespace + ".svc" }

// Write prints the objects as one YAML stream.
func (a Aggregated) Write(w io.Writer) error {
	ip := net.ParseIP(a.Address)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return fmt.Errorf("--address %q: give the IP address the kube-apiserver reaches muster on; Kubernetes refuses loopback and unspecified addresses in endpoints", a.Address)
	}
	if len(a.CA) == 0 {
		return fmt.Errorf("no CA: run this on the server's host with its --data-dir")
	}
	if a.User == "" {
		return fmt.Errorf("--user: name the user of muster's --authentication-kubeconfig")
	}
	family := "IPv4"
	if ip.To4() == nil {
		family = "IPv6"
	}
	return aggregatedTemplate.Execute(w, map[string]any{
		"A": a, "Group": api.GroupName, "Version": api.SchemeGroupVersion.Version, "Family": family,
		"CABundle": base64.StdEncoding.EncodeToString(a.CA), "Name": strings.ReplaceAll(api.GroupName, ".", "-"),
	})
}

var aggregatedTemplate = template.Must(template.New("aggregated").Parse(`# Muster as an aggregated API server: kubectl apply -f this.
# The kube-apiserver needs --enable-aggregator-routing=true (it dials the
# endpoint below directly; no kube-proxy is involved) and its front-proxy
# flags (--requestheader-*, --proxy-client-cert-file, --proxy-client-key-file).
apiVersion: v1
kind: Namespace
metadata:
  name: {{.A.Namespace}}
---
apiVersion: v1
kind: Service
metadata:
  name: {{.A.Service}}
  namespace: {{.A.Namespace}}
spec:
  ports:
  - name: https
    port: 443
    targetPort: {{.A.Port}}
---
apiVersion: v1
kind: Endpoints
metadata:
  name: {{.A.Service}}
  namespace: {{.A.Namespace}}
subsets:
- addresses:
  - ip: {{.A.Address}}
  ports:
  - name: https
    port: {{.A.Port}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {{.A.Service}}
  namespace: {{.A.Namespace}}
  labels:
    kubernetes.io/service-name: {{.A.Service}}
addressType: {{.Family}}
endpoints:
- addresses: ["{{.A.Address}}"]
  conditions: {ready: true}
ports:
- name: https
  port: {{.A.Port}}
  protocol: TCP
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: {{.Version}}.{{.Group}}
spec:
  group: {{.Group}}
  version: {{.Version}}
  groupPriorityMinimum: 1000
  versionPriority: 15
  service:
    name: {{.A.Service}}
    namespace: {{.A.Namespace}}
    port: 443
  caBundle: {{.CABundle}}
---
# Muster asks the kube-apiserver who a user is (TokenReview) and what they
# may do (SubjectAccessReview).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{.Name}}:auth-delegator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:auth-delegator
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {{.A.User}}
---
# Muster reads which front proxy to believe from this ConfigMap.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{.Name}}:auth-reader
  namespace: kube-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: extension-apiserver-authentication-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {{.A.User}}
`))
