package server

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/lifecycle"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/registration"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// startControllers runs the in-process controllers on the privileged
// loopback client and hands the authenticator and authorizer their caches.
func startControllers(ctx context.Context, loopback *rest.Config, ca *pki.CA, cfg Config, tokens *registration.TokenAuthenticator, rules *registration.Authorizer, liveness *lifecycle.Tracker) error {
	rc := rest.CopyConfig(loopback)
	// Controllers answer registration storms; client-side throttling at
	// client-go's defaults would be the bottleneck, not the server.
	rc.QPS, rc.Burst = 1000, 2000
	client, err := versioned.NewForConfig(rc)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	tokenInformer := factory.Muster().V1alpha1().ClusterRegistrationTokens()
	granter := registration.NewController(client, factory, ca, cfg.AgentCertificateValidity)
	housekeeper := registration.NewHousekeeper(client, factory)
	machines := lifecycle.NewController(client, factory, liveness, cfg.AgentSilenceThreshold)
	rules.SetClient(client)
	factory.Start(ctx.Done())
	// The hook returns (and /readyz turns ready) only once every join token
	// is in the cache, so a valid token is never refused during start-up.
	if !cache.WaitForCacheSync(ctx.Done(), tokenInformer.Informer().HasSynced) {
		return fmt.Errorf("join tokens could not be loaded from the datastore")
	}
	tokens.SetLister(tokenInformer.Lister(), client)
	go granter.Run(ctx, 4)
	go housekeeper.Run(ctx)
	go machines.Run(ctx, 4)
	return nil
}
