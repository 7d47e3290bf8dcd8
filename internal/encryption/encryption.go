// Package encryption encrypts API objects at rest with k8s.io/apiserver's
// own encryption providers (--encryption-provider-config, the file
// kube-apiserver reads: aesgcm, aescbc, secretbox, identity), and checks at
// startup that every stored object can be read with the keys given.
//
// Nothing here is cryptography of its own: the file is loaded by
// k8s.io/apiserver's encryptionconfig, and the apiserver's etcd3 storage
// calls the transformers it builds on every read and write, binding each
// ciphertext to its storage key. What this package adds is what a server
// run by one operator needs around it: the file's mode, a refusal of the
// kinds that must stay readable in the datastore, and a refusal to start
// on data the file cannot decrypt, saying which object and which key.
package encryption

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// Flag is the server flag that names the file, as kube-apiserver names it.
const Flag = "encryption-provider-config"

// Doc is where an operator reads how to set up and rotate keys.
const Doc = "docs/encryption.md"

// StoragePrefix is where the API keeps every object in the datastore
// (internal/apiserver): <prefix><group>/<resource>/<name>.
const StoragePrefix = "/registry/muster.io/"

// Group is the API group of muster's kinds.
const Group = "muster.io"

// Secret-bearing resources: at least one of them must be encrypted, or the
// file is a mistake (kube's "secrets" copied as is, a misspelt group).
var secretBearing = []schema.GroupResource{
	{Group: Group, Resource: "machineplans"},
	{Group: Group, Resource: "machineplansets"},
	// spec.kubernetesAPI.credential: the key or token the server reaches
	// the cluster's kube-apiserver with. The transition history writer
	// reads Clusters through Read.
	{Group: Group, Resource: "clusters"},
}

// readAsStored are the kinds the offline tools (a snapshot's check of
// the history against the objects) read as they are stored. They hold no
// secret: a node password and a join token are stored as salted hashes.
var readAsStored = []schema.GroupResource{
	{Group: Group, Resource: "clusterregistrationtokens"},
	{Group: Group, Resource: "clusterregistrations"},
	{Group: Group, Resource: "machines"},
}

// Config is a loaded --encryption-provider-config.
type Config struct {
	// Path is the file, for messages; its content is never logged.
	Path string
	// transformers are k8s.io/apiserver's, one per configured resource
	// (or wildcard).
	transformers map[schema.GroupResource]value.Transformer
}

// Load reads the file at path with k8s.io/apiserver's loader, after
// checking that only its owner may read it.
func Load(ctx context.Context, path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", Flag, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("--%s %s is not a regular file: give the EncryptionConfiguration file (%s)", Flag, path, Doc)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("--%s %s is mode %04o: it holds the keys that encrypt the datastore, so only its owner may read it; run chmod 600 %s and start again", Flag, path, perm, path)
	}
	// The loader's errors name fields, never a key's secret (its
	// validation prints REDACTED in place of one).
	// Only a KMS provider keeps using the context (its plugin's probes),
	// and it is refused below: nothing outlives Load.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "")
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w (the file is an apiserver.config.k8s.io/v1 EncryptionConfiguration; see %s)", Flag, path, err, Doc)
	}
	if len(loaded.HealthChecks) > 0 {
		return nil, fmt.Errorf("--%s %s names a KMS provider, which muster-server does not support: use aesgcm or secretbox keys (%s)", Flag, path, Doc)
	}
	c := &Config{Path: path, transformers: loaded.Transformers}
	for _, gr := range readAsStored {
		if c.Encrypts(gr) {
			return nil, fmt.Errorf("--%s %s encrypts %s (named, or through a wildcard): a snapshot checks the transition history against %s, which it must read as stored, and they hold no secret (node passwords and join tokens are kept as hashes); name the kinds that do, machineplans.muster.io, machineplansets.muster.io and clusters.muster.io, instead of a wildcard (%s)",
				Flag, path, gr, names(readAsStored), Doc)
		}
	}
	encrypted := false
	for _, gr := range secretBearing {
		encrypted = encrypted || c.Encrypts(gr)
	}
	if !encrypted {
		return nil, fmt.Errorf("--%s %s encrypts neither %s, the kinds that carry secrets: list them under resources (with their group, e.g. machineplans.muster.io), or drop the flag (%s)", Flag, path, names(secretBearing), Doc)
	}
	return c, nil
}

// names lists group resources as the file spells them.
func names(grs []schema.GroupResource) string {
	s := make([]string, len(grs))
	for i, gr := range grs {
		s[i] = gr.String()
	}
	return strings.Join(s, ", ")
}

// Encrypts reports whether the file configures providers for gr, by name
// or by a wildcard (*.group, *.*).
func (c *Config) Encrypts(gr schema.GroupResource) bool {
	if c == nil {
		return false
	}
	for _, k := range []schema.GroupResource{gr, {Group: gr.Group, Resource: "*"}, {Group: "*", Resource: "*"}} {
		if c.transformers[k] != nil {
			return true
		}
	}
	return false
}

// ResourceTransformers is what the apiserver's storage calls
// (server.Config.ResourceTransformers); nil when c is.
func (c *Config) ResourceTransformers() value.ResourceTransformers {
	if c == nil {
		return nil
	}
	return encryptionconfig.StaticTransformers(c.transformers)
}

// transformer is how the apiserver reads gr: the file's providers, or,
// for a resource the file does not name (or with no file), plaintext
// only, refusing what is encrypted.
func (c *Config) transformer(gr schema.GroupResource) value.Transformer {
	if c == nil {
		return identity.NewEncryptCheckTransformer()
	}
	return c.ResourceTransformers().TransformerForResource(gr)
}

// Read returns a value of the datastore as the apiserver reads it:
// decrypted with c's keys when it is encrypted, as it is otherwise. It is
// for the readers of the datastore beside the apiserver (the transition
// history writer); key is the value's full storage key, which the
// ciphertext is bound to.
func (c *Config) Read(ctx context.Context, key string, stored []byte) ([]byte, error) {
	if _, _, encrypted := keyOf(stored); !encrypted {
		return stored, nil
	}
	gr, _, ok := parseKey(key)
	if !ok {
		return stored, nil
	}
	out, _, err := c.transformer(gr).TransformFromStorage(ctx, stored, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("decrypting %s: %w", key, err)
	}
	return out, nil
}

// Report is what Check found.
type Report struct {
	// Objects is how many stored objects were read.
	Objects int
	// Stale is how many are stored otherwise than the file's first
	// provider would write them (an older key, or plaintext): a rewrite
	// moves them to it (Doc).
	Stale int
	// StaleByResource counts Stale per resource.
	StaleByResource map[string]int
}

// Check reads every object the API stores, as the apiserver would, with
// c's keys (c nil: no file given), and refuses with one message naming
// the first object that cannot be read, the key it is encrypted with and
// what to do. A server that started anyway would fail every read of it.
func Check(ctx context.Context, client *clientv3.Client, c *Config) (Report, error) {
	resp, err := client.Get(ctx, StoragePrefix, clientv3.WithPrefix())
	if err != nil {
		return Report{}, fmt.Errorf("reading the datastore to check that its objects can be decrypted: %w", err)
	}
	r := Report{Objects: len(resp.Kvs), StaleByResource: map[string]int{}}
	var first error
	failed := 0
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		gr, name, ok := parseKey(key)
		if !ok {
			continue
		}
		// The etcd3 storage authenticates each value with its full key.
		_, stale, err := c.transformer(gr).TransformFromStorage(ctx, kv.Value, value.DefaultContext(key))
		if err != nil {
			failed++
			if first == nil {
				first = unreadable(c, gr, name, kv.Value)
			}
			continue
		}
		if stale {
			r.Stale++
			r.StaleByResource[gr.String()]++
		}
	}
	if first != nil {
		switch failed {
		case 1:
		case 2:
			return r, fmt.Errorf("%w (one more object cannot be read either)", first)
		default:
			return r, fmt.Errorf("%w (%d more objects cannot be read either)", first, failed-1)
		}
		return r, first
	}
	return r, nil
}

// StaleSummary says which resources hold stale objects, for a log line.
func (r Report) StaleSummary() string {
	var parts []string
	for gr, n := range r.StaleByResource {
		parts = append(parts, fmt.Sprintf("%s: %d", gr, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// parseKey splits <StoragePrefix><group>/<resource>/<name...>; the core
// group's kinds (Events) have no group segment: <StoragePrefix>events/<ns>/<name>.
func parseKey(key string) (schema.GroupResource, string, bool) {
	rest, ok := strings.CutPrefix(key, StoragePrefix)
	if !ok {
		return schema.GroupResource{}, "", false
	}
	group, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return schema.GroupResource{}, "", false
	}
	if !strings.Contains(group, ".") {
		// A resource of the core group: what was read as the group is it.
		return schema.GroupResource{Resource: group}, rest, rest != ""
	}
	resource, name, ok := strings.Cut(rest, "/")
	if !ok || resource == "" || name == "" {
		return schema.GroupResource{}, "", false
	}
	return schema.GroupResource{Group: group, Resource: resource}, name, true
}

// encPrefix is how every encrypting provider marks what it wrote:
// k8s:enc:<provider>:v1:<key name>:<ciphertext>.
const encPrefix = "k8s:enc:"

// keyOf names the provider and key a stored value was encrypted with;
// ok is false for a value stored in plaintext.
func keyOf(stored []byte) (provider, key string, ok bool) {
	if !strings.HasPrefix(string(stored[:min(len(stored), 256)]), encPrefix) {
		return "", "", false
	}
	// k8s, enc, provider, version, key name, ciphertext
	parts := strings.SplitN(string(stored[:min(len(stored), 256)]), ":", 6)
	if len(parts) < 6 {
		return "?", "?", true
	}
	return parts[2], parts[4], true
}

// unreadable says why one object cannot be read and what to do.
func unreadable(c *Config, gr schema.GroupResource, name string, stored []byte) error {
	provider, key, encrypted := keyOf(stored)
	switch {
	case encrypted && c == nil:
		return fmt.Errorf("%s/%s in the datastore is encrypted with the %s key named %s, and muster-server was started without --%s: it could read none of those objects, so it does not start; give it the encryption config the other servers of this deployment use (%s)",
			gr, name, provider, key, Flag, Doc)
	case encrypted && !c.Encrypts(gr):
		return fmt.Errorf("%s/%s in the datastore is encrypted with the %s key named %s, and --%s %s no longer lists %s, so it cannot be read: muster-server does not start; list %s again with a provider holding that key, start the server, and rewrite every object (%s)",
			gr, name, provider, key, Flag, c.Path, gr, gr, Doc)
	case encrypted:
		return fmt.Errorf("%s/%s in the datastore is encrypted with the %s key named %s, which --%s %s cannot decrypt (the key is not in the file, or its secret differs): muster-server would fail every read of it, so it does not start; put that key back in the file after the first key, start the server, rewrite every object (%s#rotating-a-key), and only then remove it",
			gr, name, provider, key, Flag, c.Path, Doc)
	default:
		return fmt.Errorf("%s/%s in the datastore is stored in plaintext, and --%s %s has no identity provider for %s, so it cannot be read: muster-server does not start; add the provider identity: {} as the last of %s, start the server, rewrite every object (%s), and only then remove it",
			gr, name, Flag, c.Path, gr, gr, Doc)
	}
}
