package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Roles scoped to clusters (AccessBinding). A binding gives its subjects
// the grants of a built-in role (roles.go) on some clusters only: what a
// scoped user may see and change follows the object's cluster. A request
// by name is judged by the named object's cluster, read from the
// informers' caches; a list, watch or deletecollection has no name, so it
// must select its clusters with a field selector (spec.cluster=NAME), as
// kube-apiserver's node authorizer makes a kubelet select its pods with
// spec.nodeName; creates and updates are judged by the object they write
// (ScopeAdmission). Users without bindings are not judged here at all, so
// the built-in roles work exactly as before.

// bySubjectIndex indexes bindings by "User:NAME" and "Group:NAME", so that
// finding a user's bindings costs one lookup per group, however many
// bindings there are.
const bySubjectIndex = "subject"

func subjectKey(kind api.AccessSubjectKind, name string) string { return string(kind) + ":" + name }

func indexBySubject(obj interface{}) ([]string, error) {
	b, ok := obj.(*api.AccessBinding)
	if !ok {
		return nil, nil
	}
	keys := make([]string, 0, len(b.Spec.Subjects))
	for _, s := range b.Spec.Subjects {
		keys = append(keys, subjectKey(s.Kind, s.Name))
	}
	return keys, nil
}

// adminGrants are what a scope's Admin holds beyond an operator's: making
// and removing the scope's Clusters and Machines, whole control of its
// plans, plan sets and pools, and granting others access to it
// (escalation is checked when a binding is written).
var adminGrants = []roleGrant{
	{apiGroup: api.GroupName, resource: "clusters", subresource: "", verbs: []string{"create", "update", "patch", "delete"}},
	{apiGroup: api.GroupName, resource: "machines", subresource: "", verbs: []string{"create"}},
	{apiGroup: api.GroupName, resource: "accessbindings", subresource: "", verbs: []string{"get", "create", "update", "patch", "delete"}},
}

// scopedKinds are the resources whose objects belong to a cluster, and
// how a scoped list or watch names its clusters.
var scopedKinds = map[string]string{
	"clusters":                  "metadata.name",
	"machines":                  api.ScopedClusterField,
	"machineplans":              "metadata.name",
	"machineplansets":           api.ScopedClusterField,
	"machinepools":              api.ScopedClusterField,
	"clusterregistrations":      api.ScopedClusterField,
	"clusterregistrationtokens": api.ScopedClusterField,
	"events":                    "involvedObject.kind and involvedObject.name",
}

// eventKinds map an Event's involvedObject.kind to the resource whose
// object it is.
var eventKinds = map[string]string{
	"Cluster": "clusters", "Machine": "machines", "MachinePlan": "machineplans", "MachinePlanSet": "machineplansets",
	"MachinePool": "machinepools", "ClusterRegistration": "clusterregistrations", "ClusterRegistrationToken": "clusterregistrationtokens",
}

// ScopeConfig are the informers scoped authorization reads.
type ScopeConfig struct {
	Bindings      cache.SharedIndexInformer
	Clusters      listers.ClusterLister
	Machines      listers.MachineLister
	PlanSets      listers.MachinePlanSetLister
	Pools         listers.MachinePoolLister
	Tokens        listers.ClusterRegistrationTokenLister
	Registrations listers.ClusterRegistrationLister
	// Synced says whether every informer above has synced.
	Synced func() bool
	// ClusterEvents, if set, is the clusters' informer: a change of a
	// cluster's labels may withdraw a selector scope from open watches.
	ClusterEvents cache.SharedIndexInformer
}

// Scopes authorizes users by their AccessBindings.
type Scopes struct {
	cfg      ScopeConfig
	bindings cache.Indexer

	mu       sync.Mutex
	open     map[*openRequest]struct{}
	handlers []cache.ResourceEventHandlerRegistration
}

// NewScopes returns scoped authorization over cfg's informers; it adds the
// subject index to the bindings' informer, so call it before the informer
// starts.
func NewScopes(cfg ScopeConfig) (*Scopes, error) {
	if err := cfg.Bindings.AddIndexers(cache.Indexers{bySubjectIndex: indexBySubject}); err != nil {
		return nil, fmt.Errorf("indexing access bindings by subject: %w", err)
	}
	s := &Scopes{cfg: cfg, bindings: cfg.Bindings.GetIndexer(), open: map[*openRequest]struct{}{}}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { s.recheck() },
		UpdateFunc: func(interface{}, interface{}) { s.recheck() },
		DeleteFunc: func(interface{}) { s.recheck() },
	}
	reg, err := cfg.Bindings.AddEventHandler(handler)
	if err != nil {
		return nil, err
	}
	s.handlers = append(s.handlers, reg)
	if cfg.ClusterEvents != nil {
		reg, err := cfg.ClusterEvents.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(o, n interface{}) {
				oc, ok1 := o.(*api.Cluster)
				nc, ok2 := n.(*api.Cluster)
				if ok1 && ok2 && !apiequality.Semantic.DeepEqual(oc.Labels, nc.Labels) {
					s.recheck()
				}
			},
		})
		if err != nil {
			return nil, err
		}
		s.handlers = append(s.handlers, reg)
	}
	return s, nil
}

// HandlersSynced says whether the handlers that judge open requests again
// have seen every object the informers first listed.
func (s *Scopes) HandlersSynced() bool {
	for _, h := range s.handlers {
		if !h.HasSynced() {
			return false
		}
	}
	return true
}

// bindingsOf are the user's bindings, by name and by every group.
func (s *Scopes) bindingsOf(u user.Info) []*api.AccessBinding {
	// Agents, join tokens and servers are never bound: their requests
	// (a fleet's heartbeats and watches) skip the lookups.
	if u == nil || caller.Reserved(u) {
		return nil
	}
	var out []*api.AccessBinding
	add := func(key string) {
		objs, _ := s.bindings.ByIndex(bySubjectIndex, key)
		for _, o := range objs {
			if b, ok := o.(*api.AccessBinding); ok && !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	add(subjectKey(api.AccessUser, u.GetName()))
	for _, g := range u.GetGroups() {
		add(subjectKey(api.AccessGroup, g))
	}
	return out
}

// roleGrants says whether role allows the request's verb on its resource,
// whatever the cluster.
func roleGrantsRequest(role api.AccessRole, attrs authorizer.Attributes) bool {
	group := roleGroup(role)
	for _, g := range roleGrants {
		if slices.Contains(g.groups, group) && g.matches(attrs) {
			return true
		}
	}
	if role == api.AccessAdmin {
		for _, g := range adminGrants {
			if g.matches(attrs) {
				return true
			}
		}
	}
	return false
}

// roleGroup is the built-in group whose grants a role holds.
func roleGroup(role api.AccessRole) string {
	if role == api.AccessViewer {
		return caller.ViewersGroup
	}
	return caller.OperatorsGroup
}

// inScope says whether cluster is one of the binding's.
func (s *Scopes) inScope(b *api.AccessBinding, cluster string) bool {
	switch {
	case b.Spec.Scope.AllClusters:
		return true
	case cluster == "":
		return false
	case len(b.Spec.Scope.Clusters) > 0:
		return slices.Contains(b.Spec.Scope.Clusters, cluster)
	case b.Spec.Scope.ClusterSelector != nil:
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Scope.ClusterSelector)
		if err != nil {
			return false
		}
		c, err := s.cfg.Clusters.Get(cluster)
		return err == nil && sel.Matches(labels.Set(c.Labels))
	}
	return false
}

// clusterOf is the cluster the named object of resource belongs to; ok is
// false when no such object is known (or it belongs to none).
func (s *Scopes) clusterOf(resource, name string) (string, bool) {
	var cluster string
	var err error
	switch resource {
	case "clusters":
		return name, name != ""
	case "machines", "machineplans": // a plan is named after its Machine
		var m *api.Machine
		if m, err = s.cfg.Machines.Get(name); err == nil {
			cluster = m.Spec.Cluster
		}
	case "machineplansets":
		var p *api.MachinePlanSet
		if p, err = s.cfg.PlanSets.Get(name); err == nil {
			cluster = p.Spec.Cluster
		}
	case "machinepools":
		var p *api.MachinePool
		if p, err = s.cfg.Pools.Get(name); err == nil {
			cluster = p.Spec.Cluster
		}
	case "clusterregistrationtokens":
		var t *api.ClusterRegistrationToken
		if t, err = s.cfg.Tokens.Get(name); err == nil {
			cluster = t.Spec.Cluster
		}
	case "clusterregistrations":
		var r *api.ClusterRegistration
		if r, err = s.cfg.Registrations.Get(name); err == nil {
			cluster = r.ClusterName()
		}
	default:
		return "", false
	}
	return cluster, err == nil && cluster != ""
}

// selectedCluster is the cluster a list or watch selects, from its field
// selector; "" and a message saying how to select one if it selects none.
func (s *Scopes) selectedCluster(attrs authorizer.Attributes) (string, string) {
	reqs, err := attrs.GetFieldSelector()
	if err != nil {
		return "", fmt.Sprintf("its field selector does not parse (%v)", err)
	}
	value := func(field string) string {
		for _, r := range reqs {
			if r.Field == field && (r.Operator == selection.Equals || r.Operator == selection.DoubleEquals) {
				return r.Value
			}
		}
		return ""
	}
	resource := attrs.GetResource()
	how := fmt.Sprintf("a list or watch of %s by a user with cluster-scoped access must select one of their clusters: add --field-selector %s=NAME", resource, scopedKinds[resource])
	switch resource {
	case "events":
		kind, name := value("involvedObject.kind"), value("involvedObject.name")
		r, ok := eventKinds[kind]
		if !ok || name == "" {
			return "", fmt.Sprintf("a list or watch of events by a user with cluster-scoped access must name the object: add --field-selector involvedObject.kind=KIND,involvedObject.name=NAME (KIND one of Cluster, Machine, MachinePool, MachinePlanSet, MachinePlan, ClusterRegistration, ClusterRegistrationToken)")
		}
		if c, ok := s.clusterOf(r, name); ok {
			return c, ""
		}
		return "", fmt.Sprintf("no %s %q is in the clusters this user may see", kind, name)
	case "clusters", "machineplans":
		name := value("metadata.name")
		if name == "" {
			return "", how
		}
		if c, ok := s.clusterOf(resource, name); ok {
			return c, ""
		}
		return "", fmt.Sprintf("no %s %q is in the clusters this user may see", resource, name)
	}
	if c := value(api.ScopedClusterField); c != "" {
		return c, ""
	}
	return "", how
}

// Authorize judges a request by the user's bindings: NoOpinion for a user
// who has none that grants the verb (the other rules judge them), Allow or
// a Deny that says why and how.
func (s *Scopes) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "", nil
	}
	var granting []*api.AccessBinding
	for _, b := range s.bindingsOf(u) {
		if roleGrantsRequest(b.Spec.Role, attrs) {
			granting = append(granting, b)
		}
	}
	if len(granting) == 0 {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if !s.cfg.Synced() {
		return authorizer.DecisionDeny, "access bindings and the objects they reach are still loading on this server; retry in a few seconds", nil
	}
	// Every-cluster bindings hold the role as its built-in group does,
	// and paths (discovery, the drivers' schemas) belong to no cluster.
	for _, b := range granting {
		if b.Spec.Scope.AllClusters {
			return authorizer.DecisionAllow, "", nil
		}
	}
	if !attrs.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	what := attrs.GetVerb() + " " + attrs.GetResource()
	if attrs.GetSubresource() != "" {
		what += "/" + attrs.GetSubresource()
	}
	if attrs.GetResource() == "accessbindings" {
		// A binding belongs to no one cluster: a scope's admin may read
		// and change the bindings wholly inside their scope (and writes
		// are checked again, for the new scope, at admission).
		if attrs.GetName() == "" && attrs.GetVerb() == "create" {
			return authorizer.DecisionAllow, "", nil // judged at admission: the new binding's scope
		}
		if attrs.GetName() == "" {
			return authorizer.DecisionDeny, fmt.Sprintf("%s: only administrators of every cluster may list or watch access bindings; get one by name", what), nil
		}
		b, found, err := s.bindings.GetByKey(attrs.GetName())
		if err != nil || !found {
			// Unknown yet: a get answers 404; a write is judged at admission.
			return authorizer.DecisionAllow, "", nil
		}
		if s.adminOver(granting, b.(*api.AccessBinding).Spec.Scope) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, fmt.Sprintf("%s %s: its scope reaches beyond the clusters %s administers", what, attrs.GetName(), u.GetName()), nil
	}
	if _, scoped := scopedKinds[attrs.GetResource()]; !scoped || attrs.GetAPIGroup() != api.GroupName && attrs.GetResource() != "events" {
		return authorizer.DecisionDeny, fmt.Sprintf("%s belongs to no cluster: %s's access bindings reach only their clusters (an administrator of every cluster may bind allClusters)", what, u.GetName()), nil
	}
	var cluster string
	switch {
	case attrs.GetName() != "":
		if attrs.GetResource() == "events" {
			return authorizer.DecisionDeny, fmt.Sprintf("%s by name: a user with cluster-scoped access lists an object's events instead (--field-selector involvedObject.kind=KIND,involvedObject.name=NAME)", what), nil
		}
		c, ok := s.clusterOf(attrs.GetResource(), attrs.GetName())
		if !ok {
			return authorizer.DecisionDeny, fmt.Sprintf("%s %s: no such object in the clusters %s may reach", what, attrs.GetName(), u.GetName()), nil
		}
		cluster = c
	case attrs.GetVerb() == "list" || attrs.GetVerb() == "watch" || attrs.GetVerb() == "deletecollection":
		c, how := s.selectedCluster(attrs)
		if c == "" {
			return authorizer.DecisionDeny, how + " (" + s.describe(granting) + ")", nil
		}
		cluster = c
	default:
		// A create: the object's cluster is judged at admission
		// (ScopeAdmission), where the object is known.
		return authorizer.DecisionAllow, "", nil
	}
	for _, b := range granting {
		if s.inScope(b, cluster) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionDeny, fmt.Sprintf("%s in cluster %s: %s may %s only in %s", what, cluster, u.GetName(), attrs.GetVerb(), s.describe(granting)), nil
}

// describe names the scopes of bindings, for a refusal.
func (s *Scopes) describe(bs []*api.AccessBinding) string {
	var parts []string
	for _, b := range bs {
		switch {
		case len(b.Spec.Scope.Clusters) > 0:
			parts = append(parts, "clusters "+strings.Join(b.Spec.Scope.Clusters, ", ")+" (binding "+b.Name+")")
		case b.Spec.Scope.ClusterSelector != nil:
			parts = append(parts, "clusters labelled "+metav1.FormatLabelSelector(b.Spec.Scope.ClusterSelector)+" (binding "+b.Name+")")
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// adminOver says whether the bindings make their holder Admin of every
// cluster scope reaches: no one grants more than they hold.
func (s *Scopes) adminOver(held []*api.AccessBinding, scope api.AccessScope) bool {
	var admin []*api.AccessBinding
	for _, b := range held {
		if b.Spec.Role == api.AccessAdmin {
			if b.Spec.Scope.AllClusters {
				return true
			}
			admin = append(admin, b)
		}
	}
	switch {
	case scope.AllClusters:
		return false
	case len(scope.Clusters) > 0:
		for _, c := range scope.Clusters {
			if !slices.ContainsFunc(admin, func(b *api.AccessBinding) bool { return s.inScope(b, c) }) {
				return false
			}
		}
		return true
	case scope.ClusterSelector != nil:
		// A selector reaches clusters not made yet: only the same selector
		// is surely inside another.
		return slices.ContainsFunc(admin, func(b *api.AccessBinding) bool {
			return apiequality.Semantic.DeepEqual(b.Spec.Scope.ClusterSelector, scope.ClusterSelector)
		})
	}
	return false
}

// AllowedOn says whether the user's bindings allow attrs (whose object is
// known, with its cluster) on cluster; for admission.
func (s *Scopes) AllowedOn(attrs authorizer.Attributes, cluster string) bool {
	for _, b := range s.bindingsOf(attrs.GetUser()) {
		if roleGrantsRequest(b.Spec.Role, attrs) && s.inScope(b, cluster) {
			return true
		}
	}
	return false
}

// Bound says whether the user holds any binding.
func (s *Scopes) Bound(u user.Info) bool { return len(s.bindingsOf(u)) > 0 }

// CanGrant says whether u may write a binding of scope.
func (s *Scopes) CanGrant(u user.Info, scope api.AccessScope) bool {
	return s.adminOver(s.bindingsOf(u), scope)
}

// openRequest is a watch (or an exec, port-forward, log or cluster
// proxy request) a scoped user holds open: it ends once the user's
// bindings no longer allow it.
type openRequest struct {
	attrs  authorizer.Attributes
	judge  authorizer.Authorizer
	cancel context.CancelFunc
}

// Hold keeps attrs' request judged while it is open: whenever a binding
// (or a cluster's labels) change, judge (the whole chain's authorizer)
// decides again, and cancel is called once it no longer allows it. The
// returned func releases it.
func (s *Scopes) Hold(attrs authorizer.Attributes, judge authorizer.Authorizer, cancel context.CancelFunc) func() {
	r := &openRequest{attrs: attrs, judge: judge, cancel: cancel}
	s.mu.Lock()
	s.open[r] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.open, r)
		s.mu.Unlock()
	}
}

// recheck judges every open request again, ending those no longer allowed.
func (s *Scopes) recheck() {
	s.mu.Lock()
	open := make([]*openRequest, 0, len(s.open))
	for r := range s.open {
		open = append(open, r)
	}
	s.mu.Unlock()
	for _, r := range open {
		if d, _, err := r.judge.Authorize(context.Background(), r.attrs); err != nil || d != authorizer.DecisionAllow {
			r.cancel()
		}
	}
}

// Visible are the clusters a user with cluster-scoped access may see, for
// the console; scoped is false for a user the built-in roles (or an
// allClusters binding) let see every cluster.
func (s *Scopes) Visible(name string, groups []string) (clusters []string, scoped bool) {
	u := &user.DefaultInfo{Name: name, Groups: groups}
	for _, g := range groups {
		if g == user.SystemPrivilegedGroup || g == caller.ViewersGroup || g == caller.OperatorsGroup {
			return nil, false
		}
	}
	bs := s.bindingsOf(u)
	if len(bs) == 0 {
		return nil, false
	}
	seen := map[string]bool{}
	for _, b := range bs {
		switch {
		case b.Spec.Scope.AllClusters:
			return nil, false
		case len(b.Spec.Scope.Clusters) > 0:
			for _, c := range b.Spec.Scope.Clusters {
				seen[c] = true
			}
		case b.Spec.Scope.ClusterSelector != nil:
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Scope.ClusterSelector)
			if err != nil {
				continue
			}
			cs, _ := s.cfg.Clusters.List(sel)
			for _, c := range cs {
				seen[c.Name] = true
			}
		}
	}
	for c := range seen {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	return clusters, true
}
