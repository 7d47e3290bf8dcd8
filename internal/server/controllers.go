package server

import (
	"context"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/registration"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// startControllers runs the in-process controllers on the privileged
// loopback client and hands the authenticator and authorizer their caches.
func startControllers(ctx context.Context, loopback *rest.Config, ca *pki.CA, certValidity time.Duration, tokens *registration.TokenAuthenticator, rules *registration.Authorizer) error {
	cfg := rest.CopyConfig(loopback)
	// Controllers answer registration storms; client-side throttling at
	// client-go's defaults would be the bottleneck, not the server.
	cfg.QPS, cfg.Burst = 1000, 2000
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	tokenInformer := factory.Muster().V1alpha1().ClusterRegistrationTokens()
	granter := registration.NewController(client, factory, ca, certValidity)
	housekeeper := registration.NewHousekeeper(client, factory)
	rules.SetClient(client)
	factory.Start(ctx.Done())
	go func() {
		// Join tokens are accepted once the cache holds them all, so that a
		// valid token is never refused as unknown during start-up.
		if cache.WaitForCacheSync(ctx.Done(), tokenInformer.Informer().HasSynced) {
			tokens.SetLister(tokenInformer.Lister(), client)
		}
	}()
	go granter.Run(ctx, 4)
	go housekeeper.Run(ctx)
	return nil
}
