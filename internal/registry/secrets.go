package registry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Secrets in plans. A MachinePlan (and a MachinePlanSet's templates) may
// carry secrets: a 0600 file with a database password, a token in an
// instruction's argument or environment, and whatever an instruction
// echoes into the saved output. They are stored as written (the agent
// needs them), and read back whole only by a caller the authorizer allows
// "get" on machineplans/secrets or machineplansets/secrets
// (api.SecretsSubresource): administrators, operators, and a machine's
// agent for its own plan. Everyone else (viewers, the console of a
// viewer) reads api.Redacted in their place.
//
// This file is the one place that decides: the two kinds' REST storages
// are wrapped here, so every way an object leaves the API — get, list,
// watch, the tables kubectl prints (converted from what these return),
// the status subresource, and the answers to create, update, patch,
// server-side apply and delete — goes through redactFor. The server's own
// in-process reads (Objects, the controllers' loopback client as an
// administrator) see whole plans.

// lastApplied is kubectl's client-side apply record: a copy of the whole
// object as it was written, secrets included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// secretGuard decides, per caller, whether a plan's secrets leave the API.
type secretGuard struct {
	authz    authorizer.Authorizer
	resource string
}

// mayRead asks the authorizer whether the caller of ctx may read the
// secrets of the named object of g's resource (name is "" for a list or
// watch of all). A caller the request does not name reads redacted.
func (g secretGuard) mayRead(ctx context.Context, name string) bool {
	u, ok := request.UserFrom(ctx)
	if !ok || g.authz == nil {
		return false
	}
	decision, _, err := g.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: "get", APIGroup: api.GroupName, APIVersion: api.SchemeGroupVersion.Version,
		Resource: g.resource, Subresource: api.SecretsSubresource, Name: name, ResourceRequest: true,
	})
	return err == nil && decision == authorizer.DecisionAllow
}

// requestName is the object a list or watch is limited to
// (metadata.name field selector, as an agent watches its own plan).
func requestName(ctx context.Context) string {
	if info, ok := request.RequestInfoFrom(ctx); ok {
		return info.Name
	}
	return ""
}

// out returns obj as the caller of ctx may read it.
func (g secretGuard) out(ctx context.Context, name string, obj runtime.Object) runtime.Object {
	if obj == nil || !holdsSecrets(obj) || g.mayRead(ctx, name) {
		return obj
	}
	return redacted(obj)
}

func holdsSecrets(obj runtime.Object) bool {
	if c, ok := obj.(runtime.CacheableObject); ok {
		// The watch cache hands every watcher the same wrapped object,
		// serialized once for all of them.
		obj = c.GetObject()
	}
	switch obj.(type) {
	case *api.MachinePlan, *api.MachinePlanList, *api.MachinePlanSet, *api.MachinePlanSetList:
		return true
	case *api.Cluster, *api.ClusterList:
		// The credential the server reaches the cluster's kube-apiserver
		// with (spec.kubernetesAPI.credential): administrators' alone.
		return true
	case *api.NotificationSubscription, *api.NotificationSubscriptionList:
		// The key that signs its events: whoever holds it can forge them.
		return true
	}
	return false
}

// redacted returns a copy of obj with every value that may hold a secret
// replaced by api.Redacted. obj itself is never changed: it may be the
// watch cache's own copy, shared with every other reader. A watch event
// from the cache comes wrapped (runtime.CacheableObject, whose
// serialization is shared by every watcher): the copy is unwrapped, so the
// redacted object is serialized on its own.
func redacted(obj runtime.Object) runtime.Object {
	if c, ok := obj.(runtime.CacheableObject); ok {
		obj = c.GetObject()
	}
	switch o := obj.(type) {
	case *api.MachinePlan:
		c := o.DeepCopy()
		redactPlan(c)
		return c
	case *api.MachinePlanList:
		c := o.DeepCopy()
		for i := range c.Items {
			redactPlan(&c.Items[i])
		}
		return c
	case *api.MachinePlanSet:
		c := o.DeepCopy()
		redactPlanSet(c)
		return c
	case *api.MachinePlanSetList:
		c := o.DeepCopy()
		for i := range c.Items {
			redactPlanSet(&c.Items[i])
		}
		return c
	case *api.Cluster:
		c := o.DeepCopy()
		redactCluster(c)
		return c
	case *api.ClusterList:
		c := o.DeepCopy()
		for i := range c.Items {
			redactCluster(&c.Items[i])
		}
		return c
	case *api.NotificationSubscription:
		c := o.DeepCopy()
		redactSubscription(c)
		return c
	case *api.NotificationSubscriptionList:
		c := o.DeepCopy()
		for i := range c.Items {
			redactSubscription(&c.Items[i])
		}
		return c
	}
	return obj
}

// redactCluster hides the key and the token the server impersonates users
// with on the cluster's kube-apiserver; the certificate, the CA and the
// port say nothing secret, and show which credential is set.
func redactCluster(c *api.Cluster) {
	redactMeta(&c.ObjectMeta)
	if k := c.Spec.KubernetesAPI; k != nil {
		k.Credential.ClientKey = redactText(k.Credential.ClientKey)
		k.Credential.Token = redactText(k.Credential.Token)
	}
}

// redactSubscription hides the key a subscription's events are signed with.
func redactSubscription(s *api.NotificationSubscription) {
	redactMeta(&s.ObjectMeta)
	s.Spec.SigningKey = redactText(s.Spec.SigningKey)
}

func redactPlan(p *api.MachinePlan) {
	redactMeta(&p.ObjectMeta)
	redactSpec(&p.Spec)
	for i := range p.Status.Output {
		p.Status.Output[i].Output = redactText(p.Status.Output[i].Output)
	}
	for i := range p.Status.Probes {
		p.Status.Probes[i].Message = redactText(p.Status.Probes[i].Message)
	}
}

func redactPlanSet(s *api.MachinePlanSet) {
	redactMeta(&s.ObjectMeta)
	redactSpec(&s.Spec.Template)
	if s.Spec.Drain != nil {
		redactSpec(&s.Spec.Drain.Template)
	}
	if s.Status.LastCompleteTemplate != nil {
		redactSpec(s.Status.LastCompleteTemplate)
	}
}

func redactMeta(m *metav1.ObjectMeta) {
	if _, ok := m.Annotations[lastApplied]; ok {
		m.Annotations[lastApplied] = api.Redacted
	}
}

func redactSpec(s *api.MachinePlanSpec) {
	for i := range s.Files {
		s.Files[i].Content = redactText(s.Files[i].Content)
	}
	for i := range s.Instructions {
		in := &s.Instructions[i]
		redactArgs(in.Args)
		for j, e := range in.Env {
			// The name says what the value is for, and is not secret.
			if name, _, ok := strings.Cut(e, "="); ok {
				in.Env[j] = name + "=" + api.Redacted
			} else {
				in.Env[j] = api.Redacted
			}
		}
	}
	for i := range s.Probes {
		p := &s.Probes[i]
		if p.Exec != nil {
			redactArgs(p.Exec.Args)
		}
		if p.HTTPGet != nil {
			p.HTTPGet.URL = redactURL(p.HTTPGet.URL)
		}
	}
}

func redactArgs(args []string) {
	for i := range args {
		args[i] = api.Redacted
	}
}

// redactText hides a non-empty value; an empty one stays empty, so a
// reader still tells a file with content from one without.
func redactText(s string) string {
	if s == "" {
		return ""
	}
	return api.Redacted
}

// redactURL keeps what a probe checks (scheme, host, path) and hides what
// may be a credential: user info and query.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return api.Redacted
	}
	if u.User == nil && u.RawQuery == "" && !u.ForceQuery {
		return raw
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		b.WriteString(api.Redacted + "@")
	}
	b.WriteString(u.Host + u.EscapedPath()) // a fragment never leaves the agent
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + api.Redacted)
	}
	return b.String()
}

// secretsREST is a plan kind's main resource with its answers redacted
// for callers who may not read secrets.
type secretsREST struct {
	*REST
	guard secretGuard
}

// Get implements rest.Getter.
func (r *secretsREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.REST.Get(ctx, name, options)
	if err != nil {
		return obj, err
	}
	return r.guard.out(ctx, name, obj), nil
}

// List implements rest.Lister; kubectl's tables are converted from it.
func (r *secretsREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	obj, err := r.REST.List(ctx, options)
	if err != nil {
		return obj, err
	}
	return r.guard.out(ctx, requestName(ctx), obj), nil
}

// Watch implements rest.Watcher. The caller is judged once, when the
// watch starts, as a list is.
func (r *secretsREST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.REST.Watch(ctx, options)
	if err != nil || r.guard.mayRead(ctx, requestName(ctx)) {
		return w, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Object != nil && holdsSecrets(e.Object) {
			e.Object = redacted(e.Object)
		}
		return e, true
	}), nil
}

// Create implements rest.Creater.
func (r *secretsREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	out, err := r.REST.Create(ctx, obj, createValidation, options)
	if err != nil {
		return out, err
	}
	name := ""
	if o, ok := out.(Object); ok {
		name = o.GetName()
	}
	return r.guard.out(ctx, name, out), nil
}

// Update implements rest.Updater; patches and server-side apply reach it too.
func (r *secretsREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, created, err := r.REST.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	if err != nil {
		return out, created, err
	}
	return r.guard.out(ctx, name, out), created, nil
}

// Delete implements rest.GracefulDeleter.
func (r *secretsREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	out, immediate, err := r.REST.Delete(ctx, name, deleteValidation, options)
	if err != nil {
		return out, immediate, err
	}
	return r.guard.out(ctx, name, out), immediate, nil
}

// DeleteCollection implements rest.CollectionDeleter.
func (r *secretsREST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	out, err := r.REST.DeleteCollection(ctx, deleteValidation, options, listOptions)
	if err != nil {
		return out, err
	}
	return r.guard.out(ctx, requestName(ctx), out), nil
}

// GuardSecrets makes the storages of the kinds that hold secrets
// (machineplans, machineplansets, clusters, and their status) answer each
// caller only the secrets authz allows it (api.SecretsSubresource). It is
// called once, with the server's authorizer, before the storages are
// installed.
func GuardSecrets(storages []*Storage, authz authorizer.Authorizer) error {
	for _, s := range storages {
		if s.Resource != MachinePlan.Resource && s.Resource != MachinePlanSet.Resource && s.Resource != Cluster.Resource && s.Resource != NotificationSubscription.Resource {
			continue
		}
		guard := secretGuard{authz: authz, resource: s.Resource}
		main, ok := s.Main.(*REST)
		if !ok {
			return fmt.Errorf("the storage of %s is a %T, not the registry's REST: its secrets cannot be guarded", s.Resource, s.Main)
		}
		s.Main = &secretsREST{REST: main, guard: guard}
		s.Status.guard = &guard
	}
	return nil
}
