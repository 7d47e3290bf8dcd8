package apiserver

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/muster-io/muster/internal/tunnel"
)

// withTunnels serves the agents' tunnels (POST tunnel.Path) ahead of the
// apiserver's handler chain. A tunnel is a request that lasts as long as
// its agent runs; through the chain it held, for every agent, the chain's
// deep stack twice over (APIServingWithRoutine serves a long-running
// request on a goroutine of its own while the first one waits) and what
// the chain's filters keep for a request's life. Here it holds one shallow
// goroutine.
//
// What the chain did that matters for a tunnel is done here too: the
// caller is authenticated and authorized by the chain's own authenticator
// and authorizer (only a machine whose Machine exists and is not being
// deleted is allowed), it counts as heard (observe), and the request is
// bound to its Machine's UID (withAgentRequests), so that deleting the
// Machine ends it and with it the tunnel. The credential gate stays
// outside; a tunnel was never bounded by the request timeout or the
// in-flight limits (one per machine bounds them) and the hub itself ends
// them all at shutdown. Everything else goes to next.
func withTunnels(next, tunnels http.Handler, front aheadOfChain, agents *AgentAuthorizer, observe func(user.Info)) http.Handler {
	tunnels = withAgentRequests(tunnels, agents, front.refuse)
	return front.route(next, aheadRoute{
		path: tunnel.Path, method: http.MethodPost, resource: "tunnel",
		needs: "a tunnel needs the machine certificate the agent was granted",
		serve: func(w http.ResponseWriter, r *http.Request, u user.Info) {
			tunnels.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), u)))
		},
	}, observe)
}
