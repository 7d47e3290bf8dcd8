package apiserver

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// The built-in roles of standalone mode: what each group named in
// internal/caller may do, as one table. Administrators (system:masters) are
// allowed before it is read; behind a kube-apiserver its RBAC decides for
// the users the aggregator sends.

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}
	allVerbs   = append(slices.Clone(readVerbs), writeVerbs...)
)

// roleGrant allows groups the verbs on one resource (or non-resource path
// prefix) of one API group. Subresource "*" is any subresource, "" none.
type roleGrant struct {
	groups      []string
	apiGroup    string
	resource    string
	subresource string
	verbs       []string
	// path is a non-resource URL; it ends with "*" for a prefix.
	path string
	// except are subresources a "*" grant leaves out.
	except []string
}

// reachMachine are a Machine's subresources that reach into the machine
// itself through its agent's tunnel (internal/tunnel): running commands,
// opening its ports, reading its agent's log. Reading a Machine is not
// leave to run commands on it, so viewers never get them.
var reachMachine = []string{"exec", "portforward", "log"}

// withheld are the subresources viewers' read grant leaves out: reaching
// a machine, and reading the secrets a plan carries (machineplans/secrets,
// machineplansets/secrets: the registry redacts them for whoever is not
// allowed, internal/registry/secrets.go).
var withheld = append(slices.Clone(reachMachine), api.SecretsSubresource)

// readable is what viewers and operators may read. Join tokens and node
// passwords are absent: their objects hold hashes of secrets.
var readable = []string{"clusters", "clusterregistrations", "machines", "machineplans", "machineplansets", "machinepools", "serverendpoints", "controllerleases", "notificationsubscriptions"}

// roleGrants is every built-in role's permission, in one table.
var roleGrants = func() []roleGrant {
	both := []string{caller.ViewersGroup, caller.OperatorsGroup}
	ops := []string{caller.OperatorsGroup}
	var g []roleGrant
	for _, r := range readable {
		g = append(g, roleGrant{groups: both, apiGroup: api.GroupName, resource: r, subresource: "*", verbs: readVerbs, except: withheld})
	}
	g = append(g,
		roleGrant{groups: both, apiGroup: "", resource: "events", subresource: "", verbs: readVerbs},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "clusterregistrationtokens", subresource: "", verbs: allVerbs},
		// Revoking is a write of a token's status phase (Active to Revoked;
		// the token's state machine refuses any way back). Whatever else an
		// operator could write there (a count, an expiry) buys nothing they
		// cannot already have by creating a token, which they may.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "clusterregistrationtokens", subresource: "status", verbs: append(slices.Clone(readVerbs), "update", "patch")},
		// Approve and deny are writes of a registration's status phase; the
		// registration's state machine refuses every other change.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "clusterregistrations", subresource: "status", verbs: []string{"update", "patch"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "clusterregistrations", subresource: "", verbs: []string{"delete"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machineplans", subresource: "", verbs: writeVerbs},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machineplansets", subresource: "", verbs: writeVerbs},
		// Who writes plans reads them whole: their secrets (file contents,
		// arguments, environment, saved output) are the operators' own.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machineplans", subresource: api.SecretsSubresource, verbs: []string{"get"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machineplansets", subresource: api.SecretsSubresource, verbs: []string{"get"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machinepools", subresource: "", verbs: writeVerbs},
		// Who is told of the fleet's troubles, and the key that signs the
		// events: operators choose and hold it; viewers read it redacted.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "notificationsubscriptions", subresource: "", verbs: writeVerbs},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "notificationsubscriptions", subresource: api.SecretsSubresource, verbs: []string{"get"}},
		// Labels (roles that plan sets select on) and deletion; a Machine's
		// status stays the server's and its agent's.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machines", subresource: "", verbs: []string{"update", "patch", "delete"}},
		// Reaching into a machine through its agent: operators, as
		// kubectl exec and port-forward are granted to who runs a cluster.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machines", subresource: "exec", verbs: []string{"create"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machines", subresource: "portforward", verbs: []string{"create"}},
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "machines", subresource: "log", verbs: []string{"get"}},
		// A cluster's own API through the server (internal/k8sproxy):
		// viewers read it (their "*" read grant above gives them "get"),
		// operators also write, exec and port-forward (an upgraded
		// request is "create"). The cluster's RBAC then judges the user
		// the server impersonates there.
		roleGrant{groups: ops, apiGroup: api.GroupName, resource: "clusters", subresource: api.ClusterProxySubresource, verbs: []string{"create", "update", "patch", "delete"}},
		roleGrant{groups: []string{caller.MetricsReadersGroup}, path: "/metrics", verbs: []string{"get"}},
		// The drivers and their schemas (drivers.go): what a pool's
		// driverConfig may hold, which anyone who reads pools may know.
		roleGrant{groups: both, path: DriversPath, verbs: []string{"get"}},
		roleGrant{groups: both, path: DriversPath + "/*", verbs: []string{"get"}},
	)
	// Discovery and the OpenAPI documents, which kubectl reads first.
	for _, p := range []string{"/api", "/api/*", "/apis", "/apis/*", "/openapi/*"} {
		g = append(g, roleGrant{groups: both, path: p, verbs: []string{"get"}})
	}
	return g
}()

func (r roleGrant) matches(attrs authorizer.Attributes) bool {
	if !slices.Contains(r.verbs, attrs.GetVerb()) {
		return false
	}
	if !attrs.IsResourceRequest() {
		if r.path == "" {
			return false
		}
		if prefix, ok := strings.CutSuffix(r.path, "*"); ok {
			return strings.HasPrefix(attrs.GetPath(), prefix)
		}
		return attrs.GetPath() == r.path
	}
	return r.path == "" && attrs.GetAPIGroup() == r.apiGroup && attrs.GetResource() == r.resource &&
		(r.subresource == "*" && !slices.Contains(r.except, attrs.GetSubresource()) || attrs.GetSubresource() == r.subresource)
}

// roleAllows says whether a built-in role the caller holds allows the request.
func roleAllows(attrs authorizer.Attributes) bool {
	u := attrs.GetUser()
	if u == nil {
		return false
	}
	for _, g := range roleGrants {
		if g.matches(attrs) && slices.ContainsFunc(u.GetGroups(), func(have string) bool { return slices.Contains(g.groups, have) }) {
			return true
		}
	}
	return false
}

// roleDenial says which groups would have been allowed, so that a refused
// user knows whom to ask.
func roleDenial(attrs authorizer.Attributes) string {
	granted := []string{user.SystemPrivilegedGroup}
	for _, g := range roleGrants {
		if g.matches(attrs) {
			for _, group := range g.groups {
				if !slices.Contains(granted, group) {
					granted = append(granted, group)
				}
			}
		}
	}
	what := attrs.GetVerb() + " " + attrs.GetPath()
	if attrs.IsResourceRequest() {
		what = attrs.GetVerb() + " " + attrs.GetResource()
		if attrs.GetSubresource() != "" {
			what += "/" + attrs.GetSubresource()
		}
	}
	return fmt.Sprintf("muster grants %s only to groups %s", what, strings.Join(granted, ", "))
}
